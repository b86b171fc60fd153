"""Method groups of ``SessionDB``, one module per theme; ``hermes_state.store`` combines them."""

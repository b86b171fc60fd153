"""SQLite full-text search: query sanitizing and routing, FTS index layouts, repairs.

The pure query rewriting and bounded snippets are shared with PostgreSQL in
``hermes_state.search_text``; here ``fts_schema`` holds the index DDL and
what opening a file does to it, ``recovery`` the reaction to a corrupt index
during writes, and ``cjk`` the optional ``cjk_unicode61`` tokenizer. The read
queries are in ``hermes_state.sqlite.queries.search`` and the maintenance
writes in ``hermes_state.sqlite.handlers.search``.
"""

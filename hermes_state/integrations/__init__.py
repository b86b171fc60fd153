"""Adapters that put a ``SessionDB`` behind other frameworks' session interfaces.

Each lives in its own module and needs its framework installed (an optional
extra): ``hermes_state.integrations.openai_agents`` (``[openai-agents]``) and
``hermes_state.integrations.langchain`` (``[langchain]``). Adapters borrow the
store they are given and never close it.
"""

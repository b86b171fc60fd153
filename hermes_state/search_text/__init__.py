"""Search text shared by both backends: pure functions, no SQL and no driver.

``sanitize`` turns a user's query into an FTS5 expression and the terms the
other routes use (and holds the CJK ranges both backends' CJK routes are
built from); ``snippet`` builds the bounded snippets of rows with very many
hits. The SQLite backend runs the FTS5 expression itself; the PostgreSQL
backend reads its terms and phrases from it.
"""

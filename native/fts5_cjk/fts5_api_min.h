/*
** Minimal declarations of the FTS5 extension interface used by fts5_cjk.c.
**
** Debian's libsqlite3-dev ships sqlite3.h and sqlite3ext.h but not fts5.h,
** and the pysqlite3 wheels ship no headers at all. This file declares only
** the parts of the (stable, documented) FTS5 C API this tokenizer needs:
** the v1 tokenizer object and the first members of fts5_api. The member
** order and types follow the documented ABI, which SQLite keeps backward
** compatible (new members are only ever appended).
**
** Written for hermes-state; see https://sqlite.org/fts5.html#custom_tokenizers
*/
#ifndef HERMES_FTS5_API_MIN_H
#define HERMES_FTS5_API_MIN_H

/* Callback FTS5 hands to xTokenize: receives each token and its byte span. */
typedef int (*hermes_fts5_token_cb)(
  void *pCtx, int tflags, const char *pToken, int nToken, int iStart, int iEnd
);

/*
** sqlite3.h of most releases already carries the FTS5 declarations (guarded
** by _FTS5_H); declare them here only when it does not.
*/
#ifndef _FTS5_H

/* Opaque tokenizer instance, created by fts5_tokenizer.xCreate. */
typedef struct Fts5Tokenizer Fts5Tokenizer;

/* Flags FTS5 passes to xTokenize (why it is tokenizing). */
#define FTS5_TOKENIZE_QUERY     0x0001
#define FTS5_TOKENIZE_PREFIX    0x0002
#define FTS5_TOKENIZE_DOCUMENT  0x0004
#define FTS5_TOKENIZE_AUX       0x0008

/* Flag a tokenizer may pass back with a token. */
#define FTS5_TOKEN_COLOCATED    0x0001

/* Version 1 tokenizer object (still accepted by every FTS5 release). */
typedef struct fts5_tokenizer fts5_tokenizer;
struct fts5_tokenizer {
  int (*xCreate)(void *pUserData, const char **azArg, int nArg, Fts5Tokenizer **ppOut);
  void (*xDelete)(Fts5Tokenizer *pTok);
  int (*xTokenize)(Fts5Tokenizer *pTok, void *pCtx, int flags,
                   const char *pText, int nText, hermes_fts5_token_cb xToken);
};

/* The leading members of the FTS5 API object (iVersion >= 2). */
typedef struct fts5_api fts5_api;
struct fts5_api {
  int iVersion;
  int (*xCreateTokenizer)(fts5_api *pApi, const char *zName, void *pUserData,
                          fts5_tokenizer *pTokenizer, void (*xDestroy)(void *));
  int (*xFindTokenizer)(fts5_api *pApi, const char *zName, void **ppUserData,
                        fts5_tokenizer *pTokenizer);
  /* Further members (xCreateFunction, v2 tokenizer entry points) are not used. */
};

#endif /* _FTS5_H */
#endif /* HERMES_FTS5_API_MIN_H */

/*
** cjk_unicode61: an FTS5 tokenizer for mixed CJK / alphabetic text.
**
** Text is cut into two kinds of stretches:
**
**   * runs of CJK letters (Han ideographs, Hiragana, Katakana, Hangul
**     syllables and the few letter-like marks of the CJK symbols block)
**     become overlapping bigrams: "ABCD" -> "AB", "BC", "CD". A run of a
**     single CJK letter becomes that one character (a unigram).
**   * everything else is handed to the built-in unicode61 tokenizer, so
**     case folding, diacritic removal and separators behave exactly as in
**     a default FTS5 table (tokenizer arguments are passed through).
**
** Queries are tokenized the same way, so a phrase of N >= 2 CJK letters
** matches wherever those letters appear consecutively, and snippets
** highlight the whole phrase (each bigram reports its own byte span).
**
** Build:  gcc -O2 -fPIC -shared fts5_cjk.c -o libfts5_cjk.so
** (needs sqlite3ext.h, e.g. from Debian's libsqlite3-dev). Load it with
** sqlite3_load_extension(); it registers the tokenizer "cjk_unicode61"
** and the SQL function fts5_cjk_version().
**
** Written for hermes-state. Public domain where that is recognised,
** otherwise MIT, like the rest of the project.
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <string.h>

#include "fts5_api_min.h"

#define FTS5_CJK_VERSION "1"

/* True for the code points emitted as bigrams/unigrams. */
static int cjk_is_letter(unsigned int c){
  if( c < 0x3005 ) return 0;
  if( c <= 0x3007 ) return 1;                        /* 々 〆 〇 */
  if( c >= 0x3021 && c <= 0x3029 ) return 1;         /* Hangzhou numerals */
  if( c >= 0x3031 && c <= 0x3035 ) return 1;         /* kana repeat marks */
  if( c >= 0x3038 && c <= 0x303C ) return 1;
  if( c >= 0x3041 && c <= 0x3096 ) return 1;         /* Hiragana */
  if( c >= 0x309D && c <= 0x309F ) return 1;
  if( c >= 0x30A1 && c <= 0x30FA ) return 1;         /* Katakana */
  if( c >= 0x30FC && c <= 0x30FF ) return 1;
  if( c >= 0x3400 && c <= 0x4DBF ) return 1;         /* CJK extension A */
  if( c >= 0x4E00 && c <= 0x9FFF ) return 1;         /* CJK unified ideographs */
  if( c >= 0xAC00 && c <= 0xD7AF ) return 1;         /* Hangul syllables */
  if( c >= 0x20000 && c <= 0x2A6DF ) return 1;       /* CJK extension B */
  return 0;
}

/*
** Decode the UTF-8 sequence at z (n > 0 bytes available) into *pc and
** return its length. Malformed or truncated input yields a length of 1 and
** a code point that is not a CJK letter, so it is left to unicode61.
*/
static int cjk_utf8_decode(const unsigned char *z, int n, unsigned int *pc){
  unsigned int c = z[0];
  int len, i;
  if( c < 0x80 ){ *pc = c; return 1; }
  if( (c & 0xE0) == 0xC0 ){ len = 2; c &= 0x1F; }
  else if( (c & 0xF0) == 0xE0 ){ len = 3; c &= 0x0F; }
  else if( (c & 0xF8) == 0xF0 ){ len = 4; c &= 0x07; }
  else { *pc = 0xFFFD; return 1; }
  if( len > n ){ *pc = 0xFFFD; return 1; }
  for(i = 1; i < len; i++){
    if( (z[i] & 0xC0) != 0x80 ){ *pc = 0xFFFD; return 1; }
    c = (c << 6) | (z[i] & 0x3F);
  }
  *pc = c;
  return len;
}

typedef struct CjkTokenizer CjkTokenizer;
struct CjkTokenizer {
  fts5_tokenizer inner;     /* unicode61's methods */
  Fts5Tokenizer *pInner;    /* unicode61 instance used for non-CJK stretches */
};

/* Forwards unicode61's tokens with offsets made relative to the whole text. */
typedef struct CjkShift CjkShift;
struct CjkShift {
  void *pCtx;
  hermes_fts5_token_cb xToken;
  int iOffset;
};

static int cjk_shift_token(
  void *p, int tflags, const char *pToken, int nToken, int iStart, int iEnd
){
  CjkShift *s = (CjkShift *)p;
  return s->xToken(s->pCtx, tflags, pToken, nToken, iStart + s->iOffset, iEnd + s->iOffset);
}

static void cjk_delete(Fts5Tokenizer *pTok){
  CjkTokenizer *p = (CjkTokenizer *)pTok;
  if( p ){
    if( p->pInner ) p->inner.xDelete(p->pInner);
    sqlite3_free(p);
  }
}

static int cjk_create(void *pUserData, const char **azArg, int nArg, Fts5Tokenizer **ppOut){
  fts5_api *pApi = (fts5_api *)pUserData;
  void *pInnerData = 0;
  CjkTokenizer *p;
  int rc;

  *ppOut = 0;
  p = (CjkTokenizer *)sqlite3_malloc(sizeof(*p));
  if( p == 0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  rc = pApi->xFindTokenizer(pApi, "unicode61", &pInnerData, &p->inner);
  if( rc == SQLITE_OK ){
    rc = p->inner.xCreate(pInnerData, azArg, nArg, &p->pInner);
  }
  if( rc != SQLITE_OK ){
    p->pInner = 0;
    cjk_delete((Fts5Tokenizer *)p);
    return rc;
  }
  *ppOut = (Fts5Tokenizer *)p;
  return SQLITE_OK;
}

/* Tokenize text[iFrom, iTo) with unicode61. */
static int cjk_plain_stretch(
  CjkTokenizer *p, void *pCtx, int flags, const char *pText, int iFrom, int iTo,
  hermes_fts5_token_cb xToken
){
  CjkShift shift;
  if( iTo <= iFrom ) return SQLITE_OK;
  shift.pCtx = pCtx;
  shift.xToken = xToken;
  shift.iOffset = iFrom;
  return p->inner.xTokenize(p->pInner, (void *)&shift, flags, pText + iFrom, iTo - iFrom, cjk_shift_token);
}

static int cjk_tokenize(
  Fts5Tokenizer *pTok, void *pCtx, int flags, const char *pText, int nText,
  hermes_fts5_token_cb xToken
){
  CjkTokenizer *p = (CjkTokenizer *)pTok;
  const unsigned char *z = (const unsigned char *)pText;
  int rc = SQLITE_OK;
  int iPlain = 0;           /* start of the pending non-CJK stretch */
  int i = 0;

  if( pText == 0 ) return SQLITE_OK;
  if( nText < 0 ) nText = (int)strlen(pText);

  while( i < nText && rc == SQLITE_OK ){
    unsigned int c;
    int len = cjk_utf8_decode(z + i, nText - i, &c);
    int iPrev, j, nRun;
    if( !cjk_is_letter(c) ){
      i += len;
      continue;
    }
    rc = cjk_plain_stretch(p, pCtx, flags, pText, iPlain, i, xToken);
    /* Walk the CJK run, emitting [previous char, current char] bigrams. */
    iPrev = i;
    j = i + len;
    nRun = 1;
    while( rc == SQLITE_OK && j < nText ){
      unsigned int c2;
      int len2 = cjk_utf8_decode(z + j, nText - j, &c2);
      if( !cjk_is_letter(c2) ) break;
      rc = xToken(pCtx, 0, pText + iPrev, j + len2 - iPrev, iPrev, j + len2);
      iPrev = j;
      j += len2;
      nRun++;
    }
    if( rc == SQLITE_OK && nRun == 1 ){
      rc = xToken(pCtx, 0, pText + i, j - i, i, j);
    }
    i = j;
    iPlain = j;
  }
  if( rc == SQLITE_OK ){
    rc = cjk_plain_stretch(p, pCtx, flags, pText, iPlain, nText, xToken);
  }
  return rc;
}

/* Fetch the fts5_api pointer of this connection (NULL without FTS5). */
static fts5_api *cjk_fts5_api(sqlite3 *db){
  fts5_api *pRet = 0;
  sqlite3_stmt *pStmt = 0;
  if( sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &pStmt, 0) == SQLITE_OK ){
    sqlite3_bind_pointer(pStmt, 1, (void *)&pRet, "fts5_api_ptr", 0);
    sqlite3_step(pStmt);
  }
  sqlite3_finalize(pStmt);
  return pRet;
}

static void cjk_version_func(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  (void)argc;
  (void)argv;
  sqlite3_result_text(ctx, FTS5_CJK_VERSION, -1, SQLITE_STATIC);
}

static fts5_tokenizer cjk_methods = { cjk_create, cjk_delete, cjk_tokenize };

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_ftscjk_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi){
  fts5_api *pFts;
  int rc;
  SQLITE_EXTENSION_INIT2(pApi);
  pFts = cjk_fts5_api(db);
  if( pFts == 0 || pFts->iVersion < 2 ){
    if( pzErrMsg ) *pzErrMsg = sqlite3_mprintf("fts5_cjk: this SQLite has no FTS5");
    return SQLITE_ERROR;
  }
  rc = pFts->xCreateTokenizer(pFts, "cjk_unicode61", (void *)pFts, &cjk_methods, 0);
  if( rc == SQLITE_OK ){
    rc = sqlite3_create_function_v2(db, "fts5_cjk_version", 0, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                    0, cjk_version_func, 0, 0, 0);
  }
  return rc;
}

/* Default entry point, so loaders that pass no entry-point name find it. */
#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_extension_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi){
  return sqlite3_ftscjk_init(db, pzErrMsg, pApi);
}

"""The text the search benchmarks share: word lists, the seeded Zipf corpus, percentiles.

``bench/search.py``, ``search_zipf.py``, ``search_postgres.py`` and
``search_stall.py`` import these from here, so none of them imports another
benchmark module at load time.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

__all__ = ["CJK_PHRASES", "COLLOCATIONS", "COMMON", "Corpus", "SEED", "SYLLABLES", "TECH", "build_vocabulary", "pct"]

SEED = 20240611

COMMON = (  # noqa: SIM905 - a word list reads best as text
    "the to and a of i you it in is that for this be on with can not have are what do if your we but "
    "as so at or my will just was me like from an there about how would all get one use need should "
    "here by yes know which when make then also some out they more now no think could want see up any "
    "only file error code run other new time work check into way because first try right well its has "
    "our again way sure thanks good please let me look help still same did does set want"
).split()
TECH = (  # noqa: SIM905 - a word list reads best as text
    "function class method module package import export return value key list dict string number "
    "config server client request response stream json yaml table column index query commit branch "
    "merge build deploy deployment docker compose kubernetes pod container image volume network port "
    "proxy nginx postgres sqlite database cache redis queue worker task thread async await lock "
    "timeout retry latency memory disk cpu log logs trace stack exception traceback test tests pytest "
    "assert fixture mock api endpoint route handler token session user agent model prompt context "
    "window summary tool call result output input parse format render template variable environment "
    "secret credential permission denied refused connection certificate ssl tls dns host localhost "
    "script shell bash terminal command path directory folder repo repository git github pull push "
    "release version upgrade migration schema field row record transaction rollback backup restore "
    "vacuum checkpoint journal wal fsync benchmark profile metric alert dashboard grafana prometheus"
).split()
COLLOCATIONS = [
    ("connection", "refused"), ("docker", "compose"), ("unit", "tests"), ("pull", "request"),
    ("stack", "trace"), ("permission", "denied"), ("merge", "conflict"), ("memory", "leak"),
    ("race", "condition"), ("rate", "limit"), ("exit", "code"), ("environment", "variable"),
    ("database", "migration"), ("null", "pointer"), ("type", "error"), ("health", "check"),
    ("load", "balancer"), ("cache", "miss"), ("dead", "lock"), ("time", "zone"),
]
CJK_PHRASES = [
    "数据库连接失败", "部署到生产环境", "请检查配置文件", "内存泄漏问题", "服务器返回错误",
    "テストが失敗しました", "設定ファイルを確認", "ネットワークエラー", "데이터베이스 연결", "서버 오류 발생",
]
SYLLABLES = (  # noqa: SIM905 - a word list reads best as text
    "ka ri to mo na se lu pe di vo gra zen tor mil bek sha pon qui dex fal ter vin bro cas lem"
).split()


def build_vocabulary(rng: random.Random) -> list[str]:
    """Common words first (most frequent), then technical words, then a long tail of rarer words."""
    vocab = list(dict.fromkeys(COMMON + TECH))
    seen = set(vocab)
    while len(vocab) < 30_000:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            vocab.append(word)
    return vocab


class Corpus:
    """Deterministic text generator with a Zipf word distribution."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = build_vocabulary(random.Random(seed + 1))
        weights = [1.0 / (rank + 1) ** 1.07 for rank in range(len(self.vocab))]
        self.cum = list(itertools.accumulate(weights))

    def words(self, k: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=k)

    def text(self, role: str) -> str:
        rng = self.rng
        n = max(3, int(rng.lognormvariate(2.7 if role == "user" else 3.6, 0.6)))
        words = self.words(n)
        if rng.random() < 0.35:
            a, b = rng.choice(COLLOCATIONS)
            at = rng.randrange(len(words) + 1)
            words[at:at] = [a, b]
        if rng.random() < 0.05:
            words.append(rng.choice(["snake_case_name", "src/app/main.py", "v2.3.1", "chat-send", "HTTP_404"]))
        if rng.random() < 0.03:
            words.insert(rng.randrange(len(words) + 1), rng.choice(CJK_PHRASES))
        return " ".join(words)

    def message(self, i: int, ts: float) -> dict[str, Any]:
        if i % 10 == 9:
            return {"role": "tool", "content": self.text("tool"), "tool_name": "terminal", "timestamp": ts}
        role = "user" if i % 2 == 0 else "assistant"
        return {"role": role, "content": self.text(role), "timestamp": ts}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]

"""Invisible and direction-changing characters made visible, so stored text cannot disguise itself on a page.

A U+202E (right-to-left override) in a message turns ``Open invoice\u202egpj.exe``
into what reads as "Open invoiceexe.jpg"; zero-width and tag characters hide
text from the reader (and can carry instructions to a model). Each such
character is replaced by a short visible label such as ``⟨RLO⟩`` before the
page is escaped. Text direction of real right-to-left scripts is untouched
(the page sets ``dir=auto`` and ``unicode-bidi: plaintext``), and the
joiners emoji and Persian need (U+200C, U+200D) and variation selectors stay.
The JSON API and the copy buttons keep the stored text exactly.
"""

from __future__ import annotations

__all__ = ["reveal", "REVEALED"]

_NAMED = {
    0x061C: "ALM", 0x180E: "MVS", 0x200B: "ZWSP", 0x200E: "LRM", 0x200F: "RLM",
    0x202A: "LRE", 0x202B: "RLE", 0x202C: "PDF", 0x202D: "LRO", 0x202E: "RLO",
    0x2060: "WJ", 0x2061: "U+2061", 0x2062: "U+2062", 0x2063: "U+2063", 0x2064: "U+2064",
    0x2066: "LRI", 0x2067: "RLI", 0x2068: "FSI", 0x2069: "PDI",
    0xFEFF: "BOM", 0xFFF9: "U+FFF9", 0xFFFA: "U+FFFA", 0xFFFB: "U+FFFB",
}


def _table() -> dict[int, str]:
    table = {code: f"\u27e8{label}\u27e9" for code, label in _NAMED.items()}
    # C0 controls but tab and line breaks, and DEL: their Control Pictures (U+2400 block).
    for code in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)):
        table[code] = chr(0x2400 + code)
    table[0x7F] = "\u2421"
    for code in range(0x80, 0xA0):
        table[code] = f"\u27e8U+{code:04X}\u27e9"
    # Tag characters spell ASCII invisibly: shown as the letter they encode.
    for code in range(0xE0000, 0xE0080):
        letter = chr(code - 0xE0000)
        table[code] = f"\u27e8tag {letter}\u27e9" if letter.isprintable() and letter != " " else f"\u27e8U+{code:04X}\u27e9"
    return table


REVEALED: dict[int, str] = _table()


def reveal(text: str) -> str:
    """``text`` with every invisible or direction-overriding character replaced by a visible label."""
    return text.translate(REVEALED)

"""The prose about CUDA-graph support agrees with the flags (SPEC G-4).

Each family's ``SUPPORTS_CUDA_GRAPH`` / ``SUPPORTS_TRAIN_CUDA_GRAPH`` follow the committed parity
matrices (``test_parity_matrix_flags.py``, ``test_train_parity_matrix_flags.py``); this test keeps
what the documentation *says* about them from drifting:

* a family README (``libreyolo/models/<family>/README.md``) that writes ``SUPPORTS_CUDA_GRAPH =
  False`` (or ``... are False``, "flags False", "predicts and trains eagerly") must belong to a
  family whose flag is False, and the same for True;
* a "no (bitwise) parity run / no GPU parity rows / GPU rows pending" claim is wrong once the
  family has rows in both matrices;
* in ``README.md`` and ``docs/*.md`` the same claims are checked for the family a sentence names:
  a parenthesis right after a family's name belongs to that family, the rest of the sentence to
  the families named outside such parentheses;
* ``docs/STATUS.md``'s family table has a row for every registered family whose yes/no cells
  for the two graphs equal the flags, and its "Matrices:" paragraph the JSON's row and family
  counts;
* the generated ``docs/cuda-graph-*parity.md`` pages hold the rows of their JSON, family by family.

Only explicit claims are parsed (few false positives); prose that states no flag is not judged.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from libreyolo.registry import families

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# generated pages (their rows are the matrices themselves) and the STATUS table (checked by cells)
_SKIP_PAGES = {"STATUS.md", "cuda-graph-parity.md", "cuda-graph-training-parity.md", "cli.md"}
PAGES = [ROOT / "README.md"] + sorted(p for p in DOCS.glob("*.md") if p.name not in _SKIP_PAGES)

# the names prose uses for a family besides its registry name (case-sensitive)
ALIASES = {
    "birefnet": ["BiRefNet"],
    "clip": ["CLIP"],
    "convnext": ["ConvNeXt"],
    "deformable_detr": ["Deformable DETR"],
    "dino_detr": ["DINO"],
    "deim": ["DEIM"],
    "deimv2": ["DEIMv2"],
    "deit": ["DeiT"],
    "depth_anything": ["Depth Anything V2", "Depth Anything"],
    "depth_anything3": ["Depth Anything 3", "DA3"],
    "dfine": ["D-FINE"],
    "dinov2": ["DINOv2"],
    "efficientnetv2": ["EfficientNetV2"],
    "esrgan": ["RRDBNet", "Real-ESRGAN", "ESRGAN"],
    "fomo": ["FOMO"],
    "lw_detr": ["LW-DETR"],
    "mobilenetv4": ["MobileNetV4"],
    "nafnet": ["NAFNet"],
    "picodet": ["PicoDet"],
    "pidnet": ["PIDNet"],
    "ppocr": ["PP-OCR", "PP-OCRv4"],
    "resnet": ["ResNet"],
    "rf_detr": ["RF-DETR"],
    "rtdetr": ["RT-DETR"],
    "rtdetrv2": ["RT-DETRv2"],
    "rtdetrv4": ["RT-DETRv4"],
    "rtmdet": ["RTMDet"],
    "rtmdet_ins": ["RTMDet-Ins"],
    "segformer": ["SegFormer"],
    "siglip2": ["SigLIP 2", "SigLIP2"],
    "swin": ["Swin"],
    "swinir": ["SwinIR"],
    "vit": ["ViT"],
    "yolo1": ["YOLOv1"],
    "yolo7": ["YOLOv7"],
    "yolo9": ["YOLOv9"],
    "yolo9_e2e": ["YOLOv9 end-to-end"],
    "yolo9_p2": ["YOLOv9-P2"],
    "yolo9_pose": ["YOLOv9-pose"],
    "yolo9_seg": ["YOLOv9-seg"],
    "yolonas": ["YOLO-NAS"],
    "yolox": ["YOLOX"],
}

_TOKEN = re.compile(
    r"(?P<flag>\bSUPPORTS_(?:TRAIN_)?CUDA_GRAPH\b)"
    r"|(?P<val>\b(?:True|False)\b)"
    r"|(?P<other>\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b)"
    r"|(?P<brk>[.;:!?](?=\s|$))"
)
_FLAGS_WORD = re.compile(r"\bflags\b(?:\s+(?:are|stay|remain|is|both|still|set|to))*\s+\**(True|False)\b")
_EAGER_ONLY = re.compile(r"\bpredicts and trains eagerly\b")
_NO_ROWS = re.compile(
    r"\bno\s+(?:[\w-]+\s+){0,3}?parity\s+(?:run|rows?)\b"
    r"|\b(?:GPU|parity)\s+rows\s+(?:are\s+|still\s+)?pending\b"
    r"|\bparity\s+rows\b[^.;]{0,60}?\bnot\s+run\b",
    re.IGNORECASE,
)
_MAX_GAP = 60  # characters between a flag's name and the True/False that states it


def claims(text: str) -> dict:
    """What ``text`` claims: ``{"predict": bool|None, "train": bool|None, "no_rows": bool}``.

    A conflicting pair of claims for one flag (True and False) gives ``"both"``."""
    text = re.sub(r"\s+", " ", text.replace("`", "").replace("*", ""))
    said: dict[str, set] = {"predict": set(), "train": set()}
    pending: list[tuple[str, int]] = []
    for m in _TOKEN.finditer(text):
        if m.group("flag"):
            pending.append(("train" if "TRAIN" in m.group("flag") else "predict", m.end()))
        elif m.group("val"):
            value = m.group("val") == "True"
            for key, end in pending:
                if m.start() - end <= _MAX_GAP:
                    said[key].add(value)
            pending = []
        else:  # another identifier or the end of a clause: an unvalued mention states nothing
            pending = []
    for m in _FLAGS_WORD.finditer(text):
        for key in said:
            said[key].add(m.group(1) == "True")
    if _EAGER_ONLY.search(text):
        for key in said:
            said[key].add(False)
    out = {k: (None if not v else (next(iter(v)) if len(v) == 1 else "both")) for k, v in said.items()}
    out["no_rows"] = bool(_NO_ROWS.search(text))
    return out


def _rows(name: str) -> tuple[list[dict], list[dict]]:
    pred, train = _matrix_rows()
    return [r for r in pred if r["family"] == name], [r for r in train if r["family"] == name]


def stale(name: str, said: dict) -> list[str]:
    """Why ``said`` (from :func:`claims`) disagrees with family ``name``'s flags and rows."""
    cls = families()[name]
    truth = {"predict": cls.SUPPORTS_CUDA_GRAPH, "train": cls.SUPPORTS_TRAIN_CUDA_GRAPH}
    attr = {"predict": "SUPPORTS_CUDA_GRAPH", "train": "SUPPORTS_TRAIN_CUDA_GRAPH"}
    why = []
    for key in ("predict", "train"):
        if said[key] is not None and said[key] != truth[key]:
            why.append(f"says {attr[key]} is {said[key]}, the flag is {truth[key]}")
    pred, train = _rows(name)
    if said["no_rows"] and pred and train:
        why.append(f"says no parity run/rows, the matrices hold {len(pred)} prediction and "
                   f"{len(train)} training rows")
    return why


# --- family READMEs -----------------------------------------------------------------------------


def _readme(name: str) -> Path:
    return Path(inspect.getfile(families()[name])).parent / "README.md"


@pytest.mark.parametrize("name", sorted(families()))
def test_family_readme_states_the_flags_it_has(name):
    path = _readme(name)
    if not path.exists():
        pytest.skip(f"{name} has no README")
    why = stale(name, claims(_strip_code_blocks(path.read_text())))
    assert not why, f"{path.relative_to(ROOT)}: " + "; ".join(why)


# --- README.md and docs pages -------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")


def _strip_code_blocks(text: str) -> str:
    out, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            out.append("")
            continue
        out.append("" if fence else line)
    return "\n".join(out)


def _blocks(text: str) -> list[str]:
    """Paragraphs (lines joined), each table row and each list item on its own."""
    blocks, cur = [], []
    for line in _strip_code_blocks(text).splitlines():
        s = line.strip()
        if not s or s.startswith("#") or s.startswith("|") or re.match(r"^([-*+]|\d+\.)\s", s):
            if cur:
                blocks.append(" ".join(cur))
            cur = []
            if s.startswith("|") or s.startswith("#"):
                blocks.append(s)
                continue
            if not s:
                continue
        cur.append(s)
    if cur:
        blocks.append(" ".join(cur))
    return blocks


def _sentences(block: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*\[(])", block) if s.strip()]


def _mentions(sentence: str, names: list[str]) -> list[tuple[str, int, int]]:
    found = []
    for name in names:
        for alias in [name] + ALIASES.get(name, []):
            for m in re.finditer(rf"(?<![\w/]){re.escape(alias)}(?![\w]|\.\w|/)", sentence):
                found.append((name, m.start(), m.end()))
    # a longer alias wins over a shorter one inside it ("Depth Anything V2" over "Depth Anything")
    found.sort(key=lambda t: (t[1], -(t[2] - t[1])))
    out, last_end = [], -1
    for f in found:
        if f[1] >= last_end:
            out.append(f)
            last_end = f[2]
    return out


def _group_after(s: str, pos: int) -> tuple[int, int] | None:
    """The balanced parenthesis that starts at ``pos`` (after spaces), as (start, end), or None."""
    i = pos
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s) or s[i] != "(":
        return None
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return i, j + 1
    return i, len(s)


def page_claims(text: str, names: list[str]) -> list[tuple[str, str, dict]]:
    """(family, the text attributed to it, claims) for every claim-bearing scope of a page."""
    out = []
    for block in _blocks(text):
        for sent in _sentences(block):
            ments = _mentions(sent, names)
            if not ments:
                continue
            groups = {}
            for name, start, end in ments:
                g = _group_after(sent, end)
                if g:
                    groups[(name, start)] = g
            spans = list(groups.values())
            rest = sent
            for a, b in sorted(groups.values(), reverse=True):
                rest = rest[:a] + " " * (b - a) + rest[b:]
            for name, start, _end in ments:
                if any(a < start < b for a, b in spans):
                    continue
                if (name, start) in groups:
                    a, b = groups[(name, start)]
                    scope = sent[a:b]
                else:
                    scope = rest
                said = claims(scope)
                if said["predict"] is not None or said["train"] is not None or said["no_rows"]:
                    out.append((name, scope.strip(), said))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_page_states_the_flags_the_families_have(page):
    names = sorted(families())
    bad = []
    for name, scope, said in page_claims(page.read_text(), names):
        why = stale(name, said)
        if why:
            bad.append(f"{name}: {'; '.join(why)}: {scope[:160]!r}")
    assert not bad, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(bad)


# --- docs/STATUS.md family table ----------------------------------------------------------------


def _status_table() -> dict[str, tuple[str, str]]:
    text = (DOCS / "STATUS.md").read_text()
    section = text.split("## Families", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "family" or len(cells) < 5:
            continue
        rows[cells[0].split()[0]] = (cells[3], cells[4])
    return rows


def _yes(cell: str) -> bool | None:
    c = cell.replace("*", "").strip().lower()
    return True if c.startswith("yes") else False if c.startswith("no") else None


@pytest.mark.parametrize("name", sorted(families()))
def test_status_table_row_agrees_with_the_flags(name):
    rows = _status_table()
    assert name in rows, f"docs/STATUS.md's family table has no row for {name}"
    cls = families()[name]
    pred, train = rows[name]
    assert _yes(pred) is cls.SUPPORTS_CUDA_GRAPH, (
        f"STATUS.md: {name} predict graph cell {pred[:60]!r}, SUPPORTS_CUDA_GRAPH is {cls.SUPPORTS_CUDA_GRAPH}")
    assert _yes(train) is cls.SUPPORTS_TRAIN_CUDA_GRAPH, (
        f"STATUS.md: {name} train graph cell {train[:60]!r}, "
        f"SUPPORTS_TRAIN_CUDA_GRAPH is {cls.SUPPORTS_TRAIN_CUDA_GRAPH}")


def _matrix_rows() -> tuple[list[dict], list[dict]]:
    return (json.loads((DOCS / "cuda-graph-parity.json").read_text())["rows"],
            json.loads((DOCS / "cuda-graph-training-parity.json").read_text())["rows"])


def test_status_matrix_counts_are_the_matrices():
    """STATUS's "Matrices:" paragraph gives each matrix's row and family count: they are the JSON's."""
    text = re.sub(r"\s+", " ", (DOCS / "STATUS.md").read_text())
    para = text.split("Matrices: ", 1)[1].split("## ", 1)[0]
    for page, rows in zip(("cuda-graph-parity.md", "cuda-graph-training-parity.md"), _matrix_rows(),
                          strict=True):
        m = re.search(rf"\({re.escape(page)}\) \((\d+) rows, (\d+) families", para)
        assert m, f"STATUS.md's Matrices paragraph gives no '(N rows, M families' for {page}"
        want = (len(rows), len({r["family"] for r in rows}))
        assert (int(m.group(1)), int(m.group(2))) == want, (
            f"STATUS.md says {page} has {m.group(1)} rows of {m.group(2)} families; the JSON has {want}")


@pytest.mark.parametrize("page,index", [("cuda-graph-parity.md", 0), ("cuda-graph-training-parity.md", 1)])
def test_matrix_page_has_the_rows_of_its_json(page, index):
    """The generated markdown matrix was regenerated with its JSON (same rows per family)."""
    rows = _matrix_rows()[index]
    want: dict[str, int] = {}
    for r in rows:
        want[r["family"]] = want.get(r["family"], 0) + 1
    got: dict[str, int] = {}
    for line in (DOCS / page).read_text().splitlines():
        m = re.match(r"^\| ([a-z0-9_]+) \|", line)
        if m and m.group(1) != "family":
            got[m.group(1)] = got.get(m.group(1), 0) + 1
    assert got == want, f"docs/{page} rows per family {got} differ from its JSON's {want}"


# --- the parser itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("text,want", [
    ("`SUPPORTS_CUDA_GRAPH = False`, `SUPPORTS_TRAIN_CUDA_GRAPH = False`: no bitwise parity run",
     {"predict": False, "train": False, "no_rows": True}),
    ("`SUPPORTS_CUDA_GRAPH = SUPPORTS_TRAIN_CUDA_GRAPH = True`, set from the rows",
     {"predict": True, "train": True, "no_rows": False}),
    ("`SUPPORTS_CUDA_GRAPH` / `SUPPORTS_TRAIN_CUDA_GRAPH` are `False` (GPU rows pending)",
     {"predict": False, "train": False, "no_rows": True}),
    ("`SUPPORTS_CUDA_GRAPH = True` (bitwise rows); `SUPPORTS_TRAIN_CUDA_GRAPH = False`: dropout",
     {"predict": True, "train": False, "no_rows": False}),
    ("CUDA graphs: flags False, \"no bitwise parity run recorded yet\".",
     {"predict": False, "train": False, "no_rows": True}),
    ("GPU rows pending, so it predicts and trains eagerly",
     {"predict": False, "train": False, "no_rows": True}),
    ("a family with `SUPPORTS_CUDA_GRAPH` set opts in; `FUSED_ATTN_DEFAULT = False` stays",
     {"predict": None, "train": None, "no_rows": False}),
    ("both graphs replay: 4/4 prediction rows bitwise (360bf40)",
     {"predict": None, "train": None, "no_rows": False}),
])
def test_claims_parser(text, want):
    assert claims(text) == want


def test_page_scopes_give_a_parenthesis_to_the_family_before_it():
    text = ("Detection: PicoDet (s/m/l; GPU rows pending, so it predicts and trains eagerly), "
            "YOLOX (nano..x). NAFNet and RRDBNet have `SUPPORTS_CUDA_GRAPH = True`.")
    got = {(n, s["predict"], s["no_rows"]) for n, _, s in page_claims(text, ["picodet", "yolox", "nafnet", "esrgan"])}
    assert got == {("picodet", False, True), ("nafnet", True, False), ("esrgan", True, False)}

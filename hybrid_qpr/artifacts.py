"""Files in and out, one way each: the readers' input (plain, gzipped or stdin text, the
delimiter, numbered rows, JSONL), atomic writes of a file or a whole directory, the library
versions an artifact records, versioned manifests, and the encoder ``config.json``.

Kept in one place so every reader treats ``.gz``, ``-`` (stdin), byte-order marks, CSV
quoting and line numbers the same way, and every writer commits the same way: build beside,
then rename, so a reader sees the old artifact or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import itertools
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal, get_args

from hybrid_qpr.errors import ArtifactError, BadLines, InputError

Delimiter = Literal[",", "\t"]
_GZIP_MAGIC = b"\x1f\x8b"


def display_name(path: str | Path) -> str:
    return "<stdin>" if str(path) == "-" else str(path)


def iconv_fix(name: str, raw: bytes) -> str:
    """How to convert the file ``name`` whose line ``raw`` is not UTF-8: an ``iconv`` command
    that runs as printed. iconv needs the source encoding; CP1252 (Windows) is guessed when the
    line reads as that, else Latin-1, which reads any bytes."""
    try:
        raw.decode("cp1252")
        source = "CP1252"
    except UnicodeDecodeError:
        source = "LATIN1"
    if name == "<stdin>":
        return f"convert the input with iconv -f {source} -t UTF-8 (-f names its encoding; {source} is a guess)"
    path = Path(name)
    converted = path.with_name(f"{path.stem}.utf8{path.suffix}")
    return (f"convert the file with iconv -f {source} -t UTF-8 {shlex.quote(name)} > {shlex.quote(str(converted))} "
            f"(-f names the file's encoding; {source} is a guess from this line)")


class TextLines:
    """UTF-8 lines of a binary stream, decoded one line at a time so that an invalid byte
    is reported with its line number. Lines keep their ending (``\n`` or ``\r\n``), as
    the csv module wants; a byte-order mark at the start is dropped."""

    def __init__(self, binary: IO[bytes], name: str):
        self._lines = iter(binary)
        self.name = name
        self.line = 0  # number of the last line returned

    def __iter__(self) -> "TextLines":
        return self

    def __next__(self) -> str:
        raw = next(self._lines)
        self.line += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(self.name, self.line, f"not valid UTF-8 text ({exc.reason} at byte {exc.start + 1} "
                             f"of the line); {iconv_fix(self.name, raw)}") from None
        if self.line == 1 and text.startswith("\ufeff"):
            text = text[1:]
        return text

    def readline(self) -> str:
        return next(self, "")


@contextlib.contextmanager
def open_text(path: str | Path) -> Iterator[TextLines]:
    """Open ``path`` for reading as UTF-8 lines; ``-`` is stdin.

    Gzip is recognised by its magic bytes, so ``data.tsv.gz`` and a gzipped stream on
    stdin both work. Lines are split on ``\n`` only, so a quoted field with an embedded
    newline reaches the csv module intact.
    """
    name = display_name(path)
    if str(path) == "-":
        raw: IO[bytes] = sys.stdin.buffer
    else:
        try:
            raw = open(path, "rb")
        except FileNotFoundError as exc:
            raise InputError(path, None, "file not found") from exc
        except IsADirectoryError as exc:
            raise InputError(path, None, "is a directory, expected a file") from exc
    try:
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)  # type: ignore[arg-type]
        is_gzip = buffered.peek(2)[:2] == _GZIP_MAGIC
        binary: IO[bytes] = gzip.GzipFile(fileobj=buffered) if is_gzip else buffered
        lines = TextLines(binary, name)
        try:
            yield lines
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            raise InputError(name, lines.line + 1, f"corrupt or truncated gzip data ({exc})") from exc
    finally:
        if str(path) != "-":
            raw.close()


def skip_undecodable(lines: Iterable[str], bad_lines: BadLines | None, header: bool) -> Iterator[str]:
    """The lines of an ``open_text`` stream; one that is not UTF-8 goes to ``bad_lines`` (strict
    when ``None``) and, when skipped, is passed on as an empty line (so later line numbers stay
    right). The first line of a file whose first line is a ``header`` must be readable."""
    it = iter(lines)
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except InputError as exc:
            if bad_lines is None or (header and exc.line == 1):
                raise
            bad_lines.skip(exc.path, exc.line, exc.problem)
            yield "\n"


def base_suffix(path: str | Path) -> str:
    """The file extension ignoring a trailing ``.gz``: ``a.tsv.gz`` -> ``.tsv``."""
    name = Path(str(path)).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return Path(name).suffix


def pick_delimiter(path: str | Path, first_line: str) -> Delimiter:
    """``.csv`` means comma, ``.tsv``/``.tab`` tab; otherwise a tab in the first line means
    TSV and a comma means CSV."""
    suffix = base_suffix(path)
    if suffix == ".csv":
        return ","
    if suffix in (".tsv", ".tab"):
        return "\t"
    if "\t" in first_line:
        return "\t"
    if "," in first_line:
        return ","
    raise InputError(display_name(path), 1, "cannot tell the column delimiter: the first line has neither a tab nor a "
                     "comma (use a .tsv or .csv file with one row per line)")


def iter_rows(path: str | Path, lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line number, fields)`` for each row of TSV or CSV text (an open file or
    any iterable of lines).

    TSV is split on tabs with no quoting (tokenized corpora contain bare ``"``); CSV
    follows RFC 4180 quoting, so a quoted field may span lines, and the line number
    reported is the one the row starts on. Blank lines are skipped.
    """
    it = iter(lines)
    first = next(it, None)
    if first is None:
        return
    delimiter = pick_delimiter(path, first)
    chained = itertools.chain([first], it)
    if delimiter == "\t":
        reader = csv.reader(chained, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(chained, delimiter=",", quotechar='"', doublequote=True, strict=True)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(display_name(path), start, f"malformed CSV ({exc})") from exc
        if row and not (len(row) == 1 and not row[0].strip()):
            yield start, row
        start = reader.line_num + 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: Literal["w", "wb"] = "w") -> Iterator[IO]:
    """Write ``path`` through a temporary file in the same directory, then ``os.replace``
    it into place, so readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the permissions open() would
    try:
        if mode == "w":
            fh = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        else:
            fh = os.fdopen(fd, "wb")
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())  # the data is on disk before the rename makes it visible
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write one JSON object per line (UTF-8, not ASCII-escaped), atomically; return the count."""
    count = 0
    with atomic_write(path) as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False))
            fh.write("\n")
            count += 1
    return count


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
MAX_JSON_DEPTH = 500  # Python's json and SQLite's JSON functions stop near 1000 levels; a stored line must fit both


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not valid JSON ({name} is not a JSON number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"not valid JSON (the number {text[:40]} is beyond the range of a double)")
    return value


_FINITE_JSON = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_ANY_JSON = json.JSONDecoder()
_TEXT_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # what a value holds, as text


def read_json_line(line: str, *, finite: bool = True) -> Any:
    """The JSON value of one line of input. Raises ``ValueError`` with the problem as a user
    reads it for anything no store could keep: text that is not JSON, nesting deeper than
    ``MAX_JSON_DEPTH``, a number too long to convert, and a lone UTF-16 surrogate (``\\ud800``)
    in a key or string, which is not Unicode text; with ``finite`` (the default, for input that
    is stored) also ``NaN``/``Infinity`` and numbers beyond a double, which JSON cannot hold.
    ``finite=False`` reads them, for files Python's json wrote itself (an undefined metric)."""
    try:
        value = (_FINITE_JSON if finite else _ANY_JSON).decode(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        if str(exc).startswith("not valid JSON"):
            raise
        # int() refuses more than sys.get_int_max_str_digits() digits (a 5000-digit id)
        raise ValueError(f"not valid JSON (a number of more than {sys.get_int_max_str_digits()} digits)") from None
    # a lone surrogate can only come from a \\uD800-\\uDFFF escape (the line is UTF-8 text), nesting past
    # the limit only from that many brackets: most lines need no further look
    if _SURROGATE_ESCAPE.search(line) or line.count("[") + line.count("{") > MAX_JSON_DEPTH:
        problem = json_value_problem(value)
        if problem:
            raise ValueError(problem)
    return value


def json_value_problem(value: Any) -> str | None:
    """What no store could keep in ``value`` (a parsed JSON value, or a document's fields):
    nesting past ``MAX_JSON_DEPTH`` or a lone surrogate in a key or string; else ``None``.
    One ``json.dumps`` answers the common case; only a suspect value is walked (without
    recursion, whatever the depth) for the exact problem."""
    try:
        text = value if isinstance(value, str) else _TEXT_JSON.encode(value)
    except RecursionError:
        return "nested too deeply"
    if (text.isascii() or lone_surrogate(text) is None) and text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            position = lone_surrogate(item)
            if position is not None:
                return (f"holds a lone surrogate {item[position]!r} (a \\udXXX escape) at position {position} of "
                        f"{item[:40]!r}, which is not valid Unicode text")
        elif isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                return f"nested more than {MAX_JSON_DEPTH} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def lone_surrogate(text: str) -> int | None:
    """The position of a lone UTF-16 surrogate in ``text`` (JSON may escape one, ``\\ud800``;
    it is not text and UTF-8 cannot hold it), or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def iter_jsonl(
    path: str | Path,
    lines: Iterable[str] | None = None,
    bad_lines: BadLines | None = None,
    *,
    finite: bool = True,
) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSONL file (or of
    ``lines`` already read from it). A line that is not a JSON object, or that
    ``read_json_line`` refuses, goes to ``bad_lines`` (``None``: strict, it raises
    ``InputError`` naming the line). ``finite``: as for ``read_json_line``."""
    if lines is None:
        with open_text(path) as fh:
            yield from iter_jsonl(path, fh, bad_lines, finite=finite)
        return
    bad_lines = bad_lines or BadLines()
    name = display_name(path)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = read_json_line(line, finite=finite)
        except ValueError as exc:
            bad_lines.skip(name, number, str(exc))
            continue
        if isinstance(obj, dict):
            yield number, obj
        else:
            bad_lines.skip(name, number, f"expected a JSON object, found {type(obj).__name__}")


@contextlib.contextmanager
def atomic_directory(path: str | Path, marker: str) -> Iterator[Path]:
    """Build a directory beside ``path`` and swap it into place when the block succeeds.

    An existing ``path`` is replaced only if it is empty or holds ``marker`` (i.e. was
    written by us before); anything else is refused so user files are never deleted.
    """
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise InputError(path, None, "exists and is not a directory; choose another output directory")
        if any(path.iterdir()) and not (path / marker).exists():
            raise InputError(path, None, f"exists, is not empty and has no {marker}; refusing to overwrite it "
                             "(choose another output directory or remove this one)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / "replaced")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# numpy reads a .npy header with ast.literal_eval, and CPython 3.11's ast module is not safe across
# threads (two parses at once can fail with "AST constructor recursion depth mismatch": seen with
# several readers opening segments while writers commit). Every .npy header read takes this lock.
NPY_HEADER_LOCK = threading.Lock()


def load_npy(path: str | Path, mmap_mode: Literal["r", "r+"] | None = None):
    """``np.load`` of a plain array (no pickles), its header read under ``NPY_HEADER_LOCK``."""
    import numpy as np

    with NPY_HEADER_LOCK:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)


def library_versions(packages: Iterable[str]) -> dict[str, str]:
    """``{distribution: version}`` of the installed ``packages`` (absent ones left out): what an
    artifact records about the code that wrote it."""
    from importlib import metadata

    out = {}
    for package in packages:
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return out


def recorded_path(path: str | Path) -> str:
    """How a model records where its data came from: relative to the working directory (as
    the command was typed from the project's root), else the last two parts - never the
    absolute paths of the machine that trained it, which a committed model would carry along."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return Path(*path.parts[-2:]).as_posix()


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON (UTF-8, not ASCII-escaped), atomically."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def read_manifest(path: str | Path, fmt: str, version: int | tuple[int, ...] | None, *, what: str, missing: str,
                  fix: str) -> dict[str, Any]:
    """Read a versioned JSON manifest (``{"format": fmt, "format_version": version, ...}``).

    ``missing`` is the whole error message for an absent file; ``what`` names the artifact
    ("hybrid-qpr local index") in the other errors, which end with ``fix``. ``version``: the
    format version this hybrid-qpr reads, or a tuple of them; ``None`` accepts any version.
    Raises ``ArtifactError``."""
    path = Path(path)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise ArtifactError(missing) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc}); {fix}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise ArtifactError(f"{path}: not a {what} (format must be {fmt!r})")
    readable = (version,) if isinstance(version, int) else version
    if readable is not None and manifest.get("format_version") not in readable:
        raise ArtifactError(f"{path}: format_version {manifest.get('format_version')} is not supported "
                            f"(this hybrid-qpr reads {', '.join(map(str, readable))}); {fix}")
    return manifest


# ---------------------------------------------------------------------- encoder config.json
ENCODER_CONFIG_FILE = "config.json"
ENCODER_MODEL_FILE = "model.onnx"
ENCODER_TOKENIZER_FILE = "tokenizer.json"
ENCODER_FORMAT = "hybrid-qpr-encoder"
ENCODER_FORMAT_VERSION = 1  # what write_encoder_config writes for a single model
ENCODER_READABLE_VERSIONS = (1, 2)  # 2 added kind "asymmetric" (a question side and an answer side)
# The one list of model kinds (config.json "kind"), every surface reads it: 'hybrid-qpr export'
# writes the single-model kinds (the first is its default), Encoder.load reads every encoder kind
# (hybrid_qpr.encoders.<kind>), an asymmetric directory pairs two single models
# (hybrid_qpr.export.asymmetric), and a cross-encoder is a reranker (hybrid_qpr.rerankers).
SingleModelKind = Literal["transformer", "cnn"]
EncoderKind = Literal[SingleModelKind, "asymmetric"]
ModelKind = Literal[EncoderKind, "cross-encoder"]
SINGLE_MODEL_KINDS: tuple[str, ...] = get_args(SingleModelKind)
ENCODER_KINDS: tuple[str, ...] = get_args(EncoderKind)
MODEL_KINDS: tuple[str, ...] = get_args(ModelKind)
ASYMMETRIC_KIND: EncoderKind = "asymmetric"
CROSS_ENCODER_KIND: ModelKind = "cross-encoder"
EncoderSide = Literal["query", "document"]
ENCODER_SIDES: tuple[str, ...] = get_args(EncoderSide)
# The fusion (and reranker depth) tuned on the model's own validation data ('tune --save-to-model'),
# which 'ingest' gives an index that has none (hybrid_qpr.backends.base.adopt_model_fusion_defaults).
ENCODER_FUSION_DEFAULTS = "fusion_defaults"


def carried_fusion_defaults(encoder) -> dict[str, Any]:
    """The fusion defaults a loaded encoder's config.json carries (``{}`` without any, or for an
    encoder that has no config): what an index with no defaults of its own fuses with."""
    return (getattr(encoder, "config", None) or {}).get(ENCODER_FUSION_DEFAULTS) or {}


def write_encoder_config(model_dir: str | Path, config: dict[str, Any]) -> dict[str, Any]:
    """Write ``model_dir/config.json`` with the format and version stamped in; return what was written."""
    written = {"format": ENCODER_FORMAT, "format_version": ENCODER_FORMAT_VERSION, **config}
    write_json(Path(model_dir) / ENCODER_CONFIG_FILE, written)
    return written


def update_encoder_config(model_dir: str | Path, **fields: Any) -> dict[str, Any]:
    """Set ``fields`` in an encoder directory's config.json (checked first; every other field
    kept, atomically); return what was written. The fingerprint covers model.onnx and
    tokenizer.json only, so an index built with the model still accepts it."""
    return write_encoder_config(model_dir, {**read_encoder_config(model_dir), **fields})


def read_encoder_config(model_dir: str | Path) -> dict[str, Any]:
    """Read and check an encoder directory's ``config.json`` (the directory must also hold
    ``model.onnx`` and ``tokenizer.json``, except an asymmetric one, whose sides hold them).
    A config without ``format_version`` predates the field and is read as version 1; version
    2 added ``kind: "asymmetric"`` (``hybrid_qpr.encoders.asymmetric``). Raises
    ``ArtifactError`` naming the missing or bad file."""
    from hybrid_qpr.distance import check_distance
    from hybrid_qpr.fusion import check_fusion_defaults

    model_dir = Path(model_dir)
    config_path = model_dir / ENCODER_CONFIG_FILE
    if not model_dir.is_dir():
        raise ArtifactError(f"{model_dir}: model directory does not exist (expected {ENCODER_MODEL_FILE}, "
                            f"{ENCODER_TOKENIZER_FILE}, {ENCODER_CONFIG_FILE})")
    if _config_kind(config_path) == CROSS_ENCODER_KIND:
        raise ArtifactError(f"{model_dir}: a cross-encoder reranker, not an encoder; give it to --reranker "
                            "(the encoder is --model)")
    files = [ENCODER_CONFIG_FILE] if _config_kind(config_path) == ASYMMETRIC_KIND else [ENCODER_CONFIG_FILE, ENCODER_MODEL_FILE,
                                                                           ENCODER_TOKENIZER_FILE]
    for name in files:
        if not (model_dir / name).is_file():
            raise ArtifactError(f"{model_dir}: {name} is missing; export the model again with 'hybrid-qpr export'")
    config = read_manifest(config_path, ENCODER_FORMAT, None, what="hybrid-qpr encoder config",
                           missing=f"{config_path}: missing", fix="export the model again with 'hybrid-qpr export'")
    for key in ("kind", "dim", "distance"):
        if key not in config:
            raise ArtifactError(f"{config_path}: the field {key!r} is missing")
    check_distance(config["distance"])
    if ENCODER_FUSION_DEFAULTS in config:
        check_fusion_defaults(config[ENCODER_FUSION_DEFAULTS], str(config_path))
    version = config.get("format_version", ENCODER_FORMAT_VERSION)
    if version not in ENCODER_READABLE_VERSIONS:
        raise ArtifactError(f"{config_path}: format_version {version} is not supported (this hybrid-qpr reads "
                            f"{', '.join(map(str, ENCODER_READABLE_VERSIONS))}); export the model again with "
                            "'hybrid-qpr export' or upgrade hybrid-qpr")
    if config["kind"] == ASYMMETRIC_KIND:
        encoder_side_dirs(model_dir, config)  # checks that both sides exist
    return config


def _config_kind(config_path: Path) -> str | None:
    try:
        return json.loads(config_path.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None  # missing or unreadable: read_manifest reports it


def encoder_side_dirs(model_dir: str | Path, config: dict[str, Any]) -> dict[str, Path]:
    """``{"query": dir, "document": dir}`` of an asymmetric encoder directory, checked:
    ``config["sides"]`` names a subdirectory (holding its own config.json) for each side."""
    model_dir = Path(model_dir)
    sides = config.get("sides")
    if not isinstance(sides, dict) or set(sides) != set(ENCODER_SIDES):
        raise ArtifactError(f"{model_dir / ENCODER_CONFIG_FILE}: an asymmetric model needs \"sides\": "
                            '{"query": SUBDIR, "document": SUBDIR}')
    out = {}
    for side in ENCODER_SIDES:
        sub = sides[side]
        if not isinstance(sub, str) or not sub or Path(sub).is_absolute() or ".." in Path(sub).parts:
            raise ArtifactError(f"{model_dir / ENCODER_CONFIG_FILE}: sides.{side} must name a subdirectory, found {sub!r}")
        if not (model_dir / sub / ENCODER_CONFIG_FILE).is_file():
            raise ArtifactError(f"{model_dir / sub}: the {side} side's model directory is missing or has no "
                                f"{ENCODER_CONFIG_FILE}")
        out[side] = model_dir / sub
    return out


# ---------------------------------------------------------------------- training checkpoints
def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write a training checkpoint atomically: plain state only (tensors, numbers, strings, and
    lists and dicts of them - state dicts, never pickled objects), so that
    :func:`load_checkpoint` can read it with ``weights_only=True``. Needs torch."""
    import torch

    with atomic_write(path, "wb") as fh:
        torch.save(state, fh)


def load_checkpoint(path: str | Path, hint: str) -> dict[str, Any]:
    """Read a checkpoint of :func:`save_checkpoint` with ``torch.load(weights_only=True)``, which
    refuses anything that would run code on load. A missing, truncated or foreign file becomes
    ``ArtifactError`` naming the file and ending with ``hint`` (what to do about it)."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise ArtifactError(f"{path}: missing; {hint}") from exc
    except Exception as exc:  # torch raises unpickling and zip errors of several types
        reason = ("it holds pickled objects, not only tensors and plain values, so a weights-only load refuses it"
                  if "Weights only load failed" in str(exc) else str(exc).strip().splitlines()[0])
        raise ArtifactError(f"{path}: cannot read the checkpoint ({reason}); {hint}") from exc
    if not isinstance(state, dict):
        raise ArtifactError(f"{path}: not a hybrid-qpr checkpoint (found {type(state).__name__}); {hint}")
    return state

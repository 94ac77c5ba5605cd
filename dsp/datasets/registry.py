"""Where each dataset file comes from, and a verified, resumable, atomic download of it.

A file is named by its place in the DSP_DATA_DIR layout (e.g. "nq_open/NQ-open.dev.jsonl").
`fetch(name)` returns the local mirror's copy when DSP_DATA_DIR has it; otherwise it downloads the
public source into the download directory ($DSP_DOWNLOAD_DIR, default ~/.cache/dsp/data): into a
`.part` file that a later call resumes with an HTTP Range request, checked against the registered
checksum, and only then renamed into place. A corrupt download is rejected and removed.

>>> entry = REGISTRY["nq_open/NQ-open.dev.jsonl"]
>>> entry.url.startswith("https://"), entry.checksum.split(":")[0], entry.size
(True, 'sha256', 391316)

``fetch("nq_open/NQ-open.dev.jsonl")`` then gives the local path of that file (it may download, so it
is not run as a doctest).
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DataFile", "REGISTRY", "fetch", "download", "verify", "download_dir", "ChecksumError"]

log = logging.getLogger("dsp.datasets")
_GH = "https://raw.githubusercontent.com"
_LITM = f"{_GH}/nelson-liu/lost-in-the-middle/main"


@dataclass(frozen=True)
class DataFile:
    """A registered file: its public URL (None when it exists only as a local derivation), checksum
    ("sha256:<hex>" or "md5:<hex>"), size in bytes when known, and licence."""

    name: str
    url: str | None
    checksum: str | None
    size: int | None = None
    license: str = ""


def _entries(*files: DataFile) -> dict[str, DataFile]:
    return {f.name: f for f in files}


REGISTRY: dict[str, DataFile] = _entries(
    DataFile("nq_open/NQ-open.dev.jsonl",
             f"{_GH}/google-research-datasets/natural-questions/master/nq_open/NQ-open.dev.jsonl",
             "sha256:f15567f38099f3615f5b8a685c0aef449c11ad90d3da3735e8d1b98115b40616", 391316, "CC BY-SA 3.0"),
    DataFile("nq_open/NQ-open.efficientqa.dev.1.1.jsonl",
             f"{_GH}/google-research-datasets/natural-questions/master/nq_open/NQ-open.efficientqa.dev.1.1.jsonl",
             "sha256:0ad45e2fa9fd32d10b3cf08c63e6d22f97ba1a0ce44ea98040f4c18bce7e268d", 194998, "CC BY-SA 3.0"),
    DataFile("litm/nq-open-oracle.jsonl.gz", f"{_LITM}/qa_data/nq-open-oracle.jsonl.gz",
             "sha256:6a7f72b846f663a133ef952244e5a4e43f06bcf190afe34e8fbe687ce0d1653e", 900334, "MIT; NQ CC BY-SA 3.0"),
    DataFile("litm/kv-retrieval-75_keys.jsonl.gz", f"{_LITM}/kv_retrieval_data/kv-retrieval-75_keys.jsonl.gz",
             "sha256:eb6d61fc3473349f2b86df76757c6ab659cc929d907d24caf1c69928e03f6203", 1667554, "MIT"),
    DataFile("litm/kv-retrieval-140_keys.jsonl.gz", f"{_LITM}/kv_retrieval_data/kv-retrieval-140_keys.jsonl.gz",
             "sha256:66d54aae7e38779da482895ccd538faaf5309f144e54f30dc530a95091581fa1", 3104449, "MIT"),
    DataFile("hotpotqa/hotpot_dev_v1_simplified.json",
             f"{_GH}/ysymyth/ReAct/master/data/hotpot_dev_v1_simplified.json",
             "sha256:05001dcdeb2b2b2243a88f23daaf8de9237494cd387e13bc25854d3e031101d3", 1179017, "CC BY-SA 4.0"),
    DataFile("hotpotqa/hotpot_dev_distractor_v1.json",
             "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
             "sha256:4e9ecb5c8d3b719f624d66b60f8d56bf227f03914f5f0753d6fa1b359d7104ea", 46320117, "CC BY-SA 4.0"),
    DataFile("squad/dev-v1.1.json", "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json",
             "sha256:95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9", None, "CC BY-SA 4.0"),
    DataFile("qrecc/qrecc_data.zip", "https://github.com/apple/ml-qrecc/raw/main/dataset/qrecc_data.zip",
             "md5:f88fcc7ef3678cd6312080389c8abd67", None, "CC BY-SA 3.0"),
    # Derived files (see DSP_DATA_DIR's README): only a local mirror has them.
    DataFile("wiki2018/passages.jsonl.gz", None,
             "sha256:d5c7ed38c963a0dc4bf2c03e933ceda53cd44c61f2f50f389cbd2bb35c1ad727", None, "CC BY-SA"),
    DataFile("squad/squad_v1.1_dev_rebuilt.json.gz", None,
             "sha256:06bb1a55557389ff76ad6d15b981edc6de4741f13411ba8629040a05b10947ab", None, "CC BY-SA 4.0"),
    DataFile("qrecc/qrecc_test_sample.json", None,
             "sha256:f70fa3cc86b18e4b51f593ce60e840ba1ec7d06899af625c54f53a7b8a3b5476", None, "CC BY-SA 3.0"),
    DataFile("hotpotqa/hotpot_dev_distractor_sample100.jsonl", None,
             "sha256:1f16235c95a2669a516e43b35ca9912fe60a170c17b4da26e8e7e6d816f5d506", None, "CC BY-SA 4.0"),
)


class ChecksumError(ValueError):
    """A downloaded or mirrored file whose bytes are not the registered ones."""


def download_dir() -> Path:
    """Where downloads go: $DSP_DOWNLOAD_DIR, else ~/.cache/dsp/data."""
    chosen = os.environ.get("DSP_DOWNLOAD_DIR")
    return Path(chosen).expanduser() if chosen else Path.home() / ".cache" / "dsp" / "data"


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: str | os.PathLike, checksum: str | None) -> None:
    """Raise ChecksumError unless `path`'s bytes have `checksum` ("sha256:..." or "md5:...")."""
    if checksum is None:
        return
    algorithm, _, expected = checksum.partition(":")
    if algorithm not in ("sha256", "md5") or not expected:
        raise ValueError(f"unsupported checksum {checksum!r}: use 'sha256:<hex>' or 'md5:<hex>'")
    actual = _digest(Path(path), algorithm)
    if actual != expected.lower():
        raise ChecksumError(f"{path}: {algorithm} is {actual}, expected {expected}: the file is corrupt or not the registered version")


def download(url: str, dest: str | os.PathLike, checksum: str | None, timeout: float = 60.0,
             chunk: int = 1 << 20) -> Path:
    """Download `url` to `dest`: resumable (`dest.part` + Range), verified, renamed atomically."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    start = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # the .part is already complete
            response = None
        else:
            raise OSError(f"download of {url} failed: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError) as error:
        raise OSError(f"download of {url} failed: {error}; {part} keeps the {start} bytes fetched so far") from None
    if response is not None:
        with response:
            resumed = start and response.status == 206
            with part.open("ab" if resumed else "wb") as out:
                for block in iter(lambda: response.read(chunk), b""):
                    out.write(block)
    try:
        verify(part, checksum)
    except ChecksumError:
        part.unlink(missing_ok=True)  # a corrupt file must not be resumed either
        raise
    os.replace(part, dest)
    return dest


def fetch(name: str, verify_mirror: bool = False) -> Path:
    """The local path of registered file `name`: DSP_DATA_DIR's copy, a finished download, or a new download."""
    entry = REGISTRY.get(name)
    mirror = os.environ.get("DSP_DATA_DIR")
    if mirror and (Path(mirror) / name).is_file():
        path = Path(mirror) / name
        if verify_mirror and entry is not None:
            verify(path, entry.checksum)
        return path
    if entry is None:
        raise KeyError(f"{name!r} is neither in DSP_DATA_DIR nor registered; registered files: {', '.join(REGISTRY)}")
    dest = download_dir() / name
    if dest.is_file():
        return dest
    if entry.url is None:
        raise FileNotFoundError(f"{name} is a derived file with no public download: put it in DSP_DATA_DIR "
                                f"(currently {mirror or 'unset'})")
    log.warning("downloading %s from %s", name, entry.url)
    return download(entry.url, dest, entry.checksum)

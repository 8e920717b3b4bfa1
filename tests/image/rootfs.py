"""An OCI archive's root filesystem, unpacked and run as its container would be.

``unpack`` reads the archive (``index.json`` → manifest → config and layers, every blob
checked against its digest) and extracts the layers into a folder: an ``Image`` with the
config (user, entrypoint, command, environment, working directory, labels).
``Image.command`` wraps a command for ``unshare --mount --pid --fork`` + ``chroot``, since
``podman run`` is refused here: in a mount namespace of its own, the root filesystem is
bound read-only, with ``/proc`` (of the new pid namespace), a ``/dev`` of a few device
nodes and a ``tmpfs`` on ``/tmp`` (the one writable place); then ``chroot`` as the image's
user into its working directory. The network namespace is the host's, so the container
reaches loopback servers (Redis, the fake Slack, the scripted model).
``ChrootedBot`` is ``opsloop serve`` run that way. ``snapshot`` lists every path of the
root filesystem with its metadata, to show nothing was written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.emulator.bot_process import STOP_TIMEOUT_S, BotProcess

# Runs on the host inside the new namespaces: $1 the root filesystem, $2 user:group,
# $3 the working directory, then the command and its arguments.
MOUNT_AND_CHROOT = r"""
set -eu
root=$1 user=$2 workdir=$3
shift 3
mount --bind "$root" "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for node in null zero full random urandom; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
done
ln -s /proc/self/fd "$root/dev/fd"
mount -o remount,bind,ro "$root"
exec chroot --userspec="$user" "$root" /usr/bin/env --chdir="$workdir" "$@"
"""
PROBE_TIMEOUT_S = 30.0


class ImageError(AssertionError):
    """The archive is not a valid OCI image layout (a missing blob, a wrong digest)."""


@dataclass(frozen=True)
class Image:
    archive: Path
    root: Path
    manifest_digest: str
    config: Mapping[str, Any]  # the image config's "config"
    layer_bytes: int  # the gzipped layers

    @property
    def labels(self) -> Mapping[str, str]:
        return self.config.get("Labels") or {}

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config.get("Env", []))

    @property
    def user(self) -> str:
        return str(self.config["User"])

    @property
    def workdir(self) -> str:
        return str(self.config.get("WorkingDir") or "/")

    def argv(self, *args: str) -> list[str]:
        """The entrypoint with ``args``, or with the default command when none given."""
        return [*self.config["Entrypoint"], *(args or self.config.get("Cmd", []))]

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the image: new mount and pid namespaces, read-only root."""
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        return [
            unshare, "--mount", "--pid", "--fork", "--kill-child",
            "/bin/sh", "-c", MOUNT_AND_CHROOT, "sh",
            str(self.root), self.user, self.workdir, *argv,
        ]  # fmt: skip

    def environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The image's environment with ``extra`` on top, and the HOME its user has."""
        return {"HOME": "/nonexistent", **self.env, **extra}


def _blob(oci: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    path = oci / "blobs" / algorithm / hexdigest
    if algorithm != "sha256" or not path.is_file():
        raise ImageError(f"blob {digest} is missing")
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    if sha.hexdigest() != hexdigest:
        raise ImageError(f"blob {digest} does not match its digest")
    return path


def unpack(archive: Path, dest: Path) -> Image:
    """Extract the archive's image layout and its layers' root filesystem under ``dest``."""
    oci, root = dest / "oci", dest / "rootfs"
    oci.mkdir(parents=True)
    root.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(oci, filter="data")
    layout = json.loads((oci / "oci-layout").read_text())
    if layout.get("imageLayoutVersion") != "1.0.0":
        raise ImageError(f"oci-layout: {layout}")
    index = json.loads((oci / "index.json").read_text())
    (entry,) = index["manifests"]
    manifest = json.loads(_blob(oci, entry["digest"]).read_bytes())
    config = json.loads(_blob(oci, manifest["config"]["digest"]).read_bytes())
    layer_bytes = 0
    for layer in manifest["layers"]:
        path = _blob(oci, layer["digest"])
        layer_bytes += path.stat().st_size
        subprocess.run(
            ["tar", "-xzf", str(path), "-C", str(root), "--numeric-owner", "--same-permissions"],
            check=True,
        )
    return Image(archive, root, entry["digest"], config["config"], layer_bytes)


def snapshot(root: Path) -> dict[str, tuple[int, int, int, int, int]]:
    """Every path under ``root`` (not descending into /proc, /sys, /dev, /tmp) with its
    mode, owner, group, size and modification time."""
    found: dict[str, tuple[int, int, int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel in ("proc", "sys", "dev", "tmp"):
            dirnames[:] = []
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            key = os.path.normpath(os.path.join(rel, name))
            found[key] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns)
    return found


def unpacked_bytes(root: Path) -> int:
    """The size of the root filesystem's regular files, each hard-linked file once."""
    seen: set[int] = set()
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_ino not in seen and os.path.isfile(os.path.join(dirpath, name)):
                seen.add(st.st_ino)
                total += st.st_size
    return total


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


async def run_in(image: Image, argv: Sequence[str], env: Mapping[str, str]) -> Ran:
    """Run ``argv`` inside the image to its end: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *image.command(argv),
        env=image.environment(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


def container_pid(unshare_pid: int) -> int | None:
    """The host's pid of the namespace's first process (``unshare --fork``'s child)."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children")
    try:
        found = children.read_text().split()
    except OSError:
        return None
    return int(found[0]) if found else None


def ids_of(pid: int) -> tuple[int, int]:
    """The real uid and gid of a running process, from ``/proc``."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(line for line in lines if line.startswith("Uid:")).split()[1]
    gid = next(line for line in lines if line.startswith("Gid:")).split()[1]
    return int(uid), int(gid)


class ChrootedBot(BotProcess):
    """``opsloop serve`` inside the image. SIGTERM goes to the process group (``unshare``
    keeps SIGTERM for its child; the server is the pid namespace's first process)."""

    async def stop(self, *, timeout: float = STOP_TIMEOUT_S) -> int | None:  # noqa: ASYNC109
        pid = self.pid
        if pid is not None and self.running:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return await super().stop(timeout=timeout)

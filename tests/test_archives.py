"""Archives from a URL are hostile until proven otherwise: unpacking writes only folders and
regular files below the destination, on every supported Python (tarfile's own filters are not
relied on), and a refusal names the archive and the member."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile

import pytest

from svbop.archives import build_raw_folder, unpack_archive


# ------------------------------------------------------------------------------ helpers
def _file(name: str, data: bytes = b"data", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def _dir(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o777
    return info, None


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def _special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


def _tar(path, *members) -> str:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return str(path)


def _tree(root, skip=None) -> dict[str, object]:
    """Every path below ``root`` (not following links, not below ``skip``): link target or content."""
    out = {}
    for folder, dirs, files in os.walk(root):
        if skip is not None and os.path.abspath(folder).startswith(os.path.abspath(skip)):
            dirs[:] = []
            continue
        for name in dirs + files:
            path = os.path.join(folder, name)
            if skip is not None and os.path.abspath(path) == os.path.abspath(skip):
                continue
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    out[rel] = f.read()
            else:
                out[rel] = "dir"
    return out


def _links_below(root) -> list[str]:
    return [os.path.join(folder, n) for folder, dirs, files in os.walk(root) for n in dirs + files
            if os.path.islink(os.path.join(folder, n))]


@pytest.fixture
def layout(tmp_path):
    """``outer/`` with a file the attacker wants (``flag``) beside the destination ``outer/dest``."""
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "flag").write_text("original")
    return outer, outer / "dest"


def _refused(archive, dest, member: str) -> str:
    with pytest.raises(ValueError) as info:
        unpack_archive(archive, dest)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{archive}: unsafe member {member!r} refused"), message
    assert "may be truncated" not in message
    return message


# ---------------------------------------------------------------------------- CVE-2025-4517
def test_long_path_symlink_chain_cve_2025_4517_writes_nothing_outside(layout):
    """The shape of CPython's test_realpath_limit_attack (gh-135034): symlinks whose expansion
    passes PATH_MAX, so os.path.realpath stops resolving and tarfile's "data" filter (3.11.7, the
    project's Python) lets a link to ``..`` through, then a hard link and a file through it."""
    outer, dest = layout
    dest.mkdir()
    steps = "abcdefghijklmnop"
    max_path = os.pathconf(outer, "PC_PATH_MAX") if "PC_PATH_MAX" in os.pathconf_names else 4096
    component = "d" * min(254, (max_path - len(str(dest)) - 1) // (len(steps) + 1))
    members, path = [], ""
    for step in steps:
        members.append(_dir(os.path.join(path, component)))
        members.append(_link(os.path.join(path, step), component))
        path = os.path.join(path, component)
    linkpath = os.path.join(*steps, "l" * 254)
    members.append(_link(linkpath, os.path.join(*[".."] * len(steps))))
    members.append(_link("escape", os.path.join(linkpath, "..")))
    members.append(_link("flaglink", os.path.join("escape", "flag"), tarfile.LNKTYPE))
    members.append(_file("flaglink", b"overwrite"))
    members.append(_file("escape/newfile", b"new"))
    archive = _tar(outer.parent / "chain.tar", *members)
    before = _tree(outer, skip=dest)

    message = _refused(archive, dest, "a")
    assert "link" in message
    assert _tree(outer, skip=dest) == before  # flag not overwritten, no newfile beside dest
    assert (outer / "flag").read_text() == "original"
    assert _links_below(dest) == []  # no symlink left in the destination (raw/), to / or anywhere


# ---------------------------------------------------------------------------- simple cases
@pytest.mark.parametrize(
    "members, refused, reason",
    [
        ([_file("../escape.txt")], "../escape.txt", "'..'"),
        ([_file("ok/../../escape.txt")], "ok/../../escape.txt", "'..'"),
        ([_file("/ABS")], "/ABS", "absolute"),
        ([_link("root", "/")], "root", "link to '/'"),
        ([_link("up", "..")], "up", "outside"),
        ([_link("hard", "../flag", tarfile.LNKTYPE)], "hard", "outside"),
        ([_link("hard", "/etc/passwd", tarfile.LNKTYPE)], "hard", "absolute"),
        # a symlink to a folder inside, then a file through it (refused at the link: no symlink is ever made)
        ([_dir("sub"), _link("d", "sub"), _file("d/x")], "d", "not a regular file unpacked before it"),
        # a symlink to outside, then a file through it
        ([_link("d", "../"), _file("d/flag", b"overwrite")], "d", "outside"),
        ([_special("dev", tarfile.CHRTYPE)], "dev", "character device"),
        ([_special("blk", tarfile.BLKTYPE)], "blk", "block device"),
        ([_special("fifo", tarfile.FIFOTYPE)], "fifo", "FIFO"),
        ([_link("", "..")], "", "outside"),  # an empty-named symlink (gh-149486's chain)
        ([_file("x"), _file("x/y")], "x/y", "not a folder"),
    ],
)
def test_unsafe_tar_members_are_refused_by_name(layout, members, refused, reason):
    outer, dest = layout
    members = [(_file(str(outer / "abs_victim"))[0], b"data") if m[0].name == "/ABS" else m for m in members]
    refused = str(outer / "abs_victim") if refused == "/ABS" else refused
    archive = _tar(outer.parent / "evil.tar", *members)
    before = _tree(outer.parent, skip=dest)
    message = _refused(archive, dest, refused)
    assert reason in message, message
    assert _tree(outer.parent, skip=dest) == before
    assert _links_below(dest) == []


def test_zip_members_with_dotdot_absolute_or_links_are_refused(layout):
    outer, dest = layout
    for name in ("../escape.txt", str(outer / "abs.txt"), "a\\..\\..\\escape.txt"):
        with zipfile.ZipFile(outer.parent / "evil.zip", "w") as zf:
            zf.writestr(name, "no")
        before = _tree(outer.parent, skip=dest)
        _refused(outer.parent / "evil.zip", dest, name)
        assert _tree(outer.parent, skip=dest) == before
    with zipfile.ZipFile(outer.parent / "link.zip", "w") as zf:
        info = zipfile.ZipInfo("up")
        info.create_system, info.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "../flag")
    assert "outside" in _refused(outer.parent / "link.zip", dest, "up")
    assert _links_below(dest) == []


def test_a_member_never_writes_through_a_link_already_in_the_destination(layout):
    """The raw folder links the plain downloads; an archive member of the same name (or below a
    linked folder) must not write through the link into the download or the user's folder."""
    outer, dest = layout
    dest.mkdir()
    os.symlink(outer / "flag", dest / "labels.csv")
    os.symlink(outer, dest / "userdir")
    for member in ("labels.csv", "userdir/flag", "userdir/new.txt"):
        archive = _tar(outer.parent / "over.tar", _file(member, b"overwrite"))
        message = _refused(archive, dest, member)
        assert "symbolic link" in message
    assert (outer / "flag").read_text() == "original" and not (outer / "new.txt").exists()


def test_safe_links_regular_files_and_modes(tmp_path):
    """What a dataset archive holds unpacks as before: ``./`` names, folders, files; a link to a
    file unpacked before it becomes a regular file with its content; modes lose setuid and
    group/other write."""
    archive = _tar(
        tmp_path / "ok.tar",
        _dir("./"),
        _dir("./data"),
        _file("./data/a.txt", b"A", mode=0o4777),
        _file("data/run.sh", b"#!", mode=0o755),
        _link("data/b.txt", "a.txt"),
        _link("data/sub/c.txt", "../a.txt"),
        _link("d.txt", "data/a.txt", tarfile.LNKTYPE),
        _file("data/a.txt", b"A2"),  # a later member replaces an earlier one, as tar does
    )
    dest = tmp_path / "dest"
    assert unpack_archive(archive, dest) == 8
    assert _links_below(dest) == []
    assert (dest / "data/a.txt").read_bytes() == b"A2"
    assert (dest / "data/b.txt").read_bytes() == b"A" and (dest / "data/sub/c.txt").read_bytes() == b"A"
    assert (dest / "d.txt").read_bytes() == b"A"
    assert not os.stat(dest / "data/b.txt").st_mode & (stat.S_ISUID | stat.S_IWGRP | stat.S_IWOTH)
    assert os.stat(dest / "data/run.sh").st_mode & stat.S_IXUSR
    with zipfile.ZipFile(tmp_path / "ok.zip", "w") as zf:
        zf.writestr("z/", "")
        zf.writestr("z/a.txt", "za")
    assert unpack_archive(tmp_path / "ok.zip", tmp_path / "zdest") == 2
    assert (tmp_path / "zdest/z/a.txt").read_text() == "za"


def test_truncated_archive_says_truncated_and_unsafe_does_not(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info, data = _file("big.bin", os.urandom(100000))
        tf.addfile(info, io.BytesIO(data))
    (tmp_path / "cut.tar.gz").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ValueError, match=r"cut.tar.gz: cannot unpack .*the file may be truncated"):
        unpack_archive(tmp_path / "cut.tar.gz", tmp_path / "out")
    message = _refused(_tar(tmp_path / "evil.tar", _file("../x")), tmp_path / "out", "../x")
    assert "may be truncated" not in message


# ------------------------------------------------------------------------- build_raw_folder
def _victim(folder) -> str:
    """A user's archive outside the raw folder, that unpack: must never unpack or delete."""
    folder.mkdir(exist_ok=True)
    return _tar(folder / "victim.tar", _file("inside.txt", b"x"))


@pytest.mark.parametrize("entry", ["ABS", "../victim/victim.tar", "raw/../../victim/victim.tar", "./a/x.tar", "a//x.tar"])
def test_unpack_entries_outside_the_raw_folder_are_refused_and_nothing_is_deleted(tmp_path, entry):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    _tar(downloads / "a.tar", _file("a/x.tar", b"not a tar"))
    victim = _victim(tmp_path / "victim")
    if entry == "ABS":
        entry = victim
    before = _tree(tmp_path / "victim")
    with pytest.raises(ValueError, match=r"unpack: .* (is neither|relative path)") as info:
        build_raw_folder(downloads, tmp_path / "data/raw", ["a.tar"], ["a.tar", entry])
    assert repr(entry) in str(info.value)
    assert _tree(tmp_path / "victim") == before and os.path.exists(victim)
    assert not (tmp_path / "data/raw").exists()


def test_unpack_entry_through_a_linked_folder_is_refused_and_nothing_is_deleted(tmp_path):
    """A ``path:`` file that is a folder is linked into raw; ``unpack: [that/victim.tar]`` went
    through the link, unpacked into the user's folder and deleted the user's archive."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    victim = _victim(tmp_path / "userdir")
    os.symlink(tmp_path / "userdir", downloads / "mine")
    before = _tree(tmp_path / "userdir")
    with pytest.raises(ValueError, match=r"unpack: 'mine/victim.tar' is neither .*symbolic link"):
        build_raw_folder(downloads, tmp_path / "data/raw", ["mine"], ["mine/victim.tar"])
    assert _tree(tmp_path / "userdir") == before and os.path.exists(victim)


def test_archive_member_named_like_a_linked_download_is_refused(tmp_path):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "labels.csv").write_text("a,b\n")
    _tar(downloads / "a.tar", _file("labels.csv", b"overwrite"))
    with pytest.raises(ValueError, match=r"a.tar: unsafe member 'labels.csv' refused \(it would replace the symbolic link"):
        build_raw_folder(downloads, tmp_path / "data/raw", ["a.tar", "labels.csv"], ["a.tar"])
    assert (downloads / "labels.csv").read_text() == "a,b\n"


@pytest.mark.parametrize("name", [".", "..", "a/b", "a\\b", ""])
def test_build_raw_folder_refuses_file_names_that_are_not_plain(tmp_path, name):
    (tmp_path / "downloads").mkdir()
    with pytest.raises(ValueError, match="not a plain file name"):
        build_raw_folder(tmp_path / "downloads", tmp_path / "data/raw", [name])


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_a_decompression_bomb_cannot_fill_the_disk(tmp_path, kind):
    """A few KB that unpack to 8 MB, with a bound of 1 MB (the default bound is the free disk
    space less 1 GB): refused while unpacking, the partial member removed with the folder."""
    archive = tmp_path / f"bomb.{kind}"
    zeros = b"\0" * (8 << 20)
    if kind == "zip":
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("zeros.bin", zeros)
    else:
        with tarfile.open(archive, "w:gz") as tf:
            info = tarfile.TarInfo("zeros.bin")
            info.size = len(zeros)
            tf.addfile(info, io.BytesIO(zeros))
    assert archive.stat().st_size < 100_000
    with pytest.raises(ValueError, match=r"unsafe member 'zeros.bin' refused \(the archive unpacks to more than 1 MB"):
        unpack_archive(archive, tmp_path / "out", max_bytes=1 << 20)
    assert (tmp_path / "out" / "zeros.bin").stat().st_size <= 1 << 20
    assert unpack_archive(archive, tmp_path / "fine", max_bytes=9 << 20) == 1

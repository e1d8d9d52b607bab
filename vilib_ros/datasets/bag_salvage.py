"""Read a damaged bag front to back, without its index: what is readable is replayed.

``rosbags`` opens a bag through its index (a ROS 1 bag's index at the end of the file, an MCAP
summary, an intact sqlite3 database, ``metadata.yaml``); a bag cut short by a full disk or a
killed recorder has none of them. :class:`SalvageReader` walks the records instead and stops at
the first one that is cut or unreadable, saying where (``stopped``):

* ROS 1 ``.bag`` (format 2.0): chunk after chunk (uncompressed, bz2, lz4 where installed),
  connection and message records inside;
* ROS 2 sqlite3 (``.db3``): a sparse copy padded to the size its header declares (sqlite refuses
  a shorter file), then row by row: rows on missing pages are skipped and counted;
* MCAP: record after record, chunks decompressed with ``rosbags``' codecs.

It offers the part of ``rosbags.highlevel.AnyReader`` that :class:`~.bags.BagDataset` uses:
``connections`` (``.id``, ``.topic``, ``.msgtype``), ``messages(connections, start, stop)``
yielding ``(connection, bag_time_ns, raw)``, ``deserialize(raw, msgtype)`` and ``close()``.
Use it from one thread (sqlite3).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import tempfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

MCAP_MAGIC = b"\x89MCAP0\r\n"


@dataclass(frozen=True)
class SalvagedConnection:
    id: int
    topic: str
    msgtype: str
    msgdef: str = ""


def _ros2_type(name: str) -> str:
    """'sensor_msgs/Image' -> 'sensor_msgs/msg/Image' (ROS 1 names in ROS 2 form)."""
    parts = name.split("/")
    return f"{parts[0]}/msg/{parts[1]}" if len(parts) == 2 else name


def storage_file(path: Path) -> Path | None:
    """The storage file of a ROS 2 bag folder (``*.db3`` or ``*.mcap``), if there is one."""
    files = sorted(Path(path).glob("*.db3")) + sorted(Path(path).glob("*.mcap"))
    return files[0] if files else None


class SalvageReader:
    """A bag read front to back (see the module docstring). ``path``: a ``.bag`` file, a ``.db3``
    or ``.mcap`` file, or a ROS 2 bag folder holding one."""

    def __init__(self, path: str | Path):
        p = Path(path)
        if p.is_dir():
            f = storage_file(p)
            if f is None:
                raise ValueError(f"{p}: no .db3 or .mcap storage file in the bag folder")
            p = f
        self.path = p
        self.size = p.stat().st_size
        self.connections: list[SalvagedConnection] = []
        self._index: list[tuple[int, int, object]] = []     # (connection id, bag time, location)
        self.stopped: str | None = None
        self.skipped_rows = 0
        self._tmpdir: str | None = None
        self._db: sqlite3.Connection | None = None
        self._chunk_cache: tuple = (None, b"")
        self._f = open(p, "rb")
        head = self._f.read(13)
        self._f.seek(0)
        if head.startswith(b"#ROSBAG V2.0"):
            self.ros1 = True
            self._scan_ros1()
        elif head.startswith(MCAP_MAGIC):
            self.ros1 = False
            self._scan_mcap()
        elif head.startswith(b"SQLite format"):
            self.ros1 = False
            self._scan_sqlite()
        else:
            self._f.close()
            raise ValueError(f"{p}: not a ROS 1 bag, an MCAP file or an sqlite3 database")
        self._build_typestore()

    # ------------------------------------------------------------------ reading
    def _stop(self, where: int, why: str) -> None:
        n = len(self._index)
        last = f", last bag time {self._index[-1][1]}" if n else ""
        self.stopped = f"stopped at byte {where} of {self.size} after {n} messages{last}: {why}"

    def _scan_ros1(self) -> None:
        from rosbags.rosbag1.reader import Header, ReaderError, RecordType, read_bytes, read_uint32

        f = self._f
        f.readline()
        known: dict[int, SalvagedConnection] = {}
        while True:
            pos = f.tell()
            if pos >= self.size:
                return
            try:
                header = Header.read(f)
                op = header.get_uint8("op")
                size = read_uint32(f)
                if op == RecordType.CHUNK:
                    compression = header.get_string("compression")
                    datapos = f.tell()
                    data = read_bytes(f, size)
                    self._scan_ros1_records(BytesIO(self._decompress_ros1(compression, data)), known,
                                            (datapos, size, compression))
                elif op == RecordType.CONNECTION:
                    self._ros1_connection(header, read_bytes(f, size), known)
                elif op == RecordType.MSGDATA:
                    self._index.append((header.get_uint32("conn"), header.get_time("time"), ("file", f.tell(), size)))
                    f.seek(size, os.SEEK_CUR)
                else:
                    f.seek(size, os.SEEK_CUR)
            except (ReaderError, ValueError, OSError, EOFError) as exc:
                self._stop(pos, f"record cut or unreadable ({exc})")
                return

    def _decompress_ros1(self, compression: str, data: bytes) -> bytes:
        from rosbags.rosbag1.reader import decompressors

        if compression not in decompressors:
            raise ValueError(f"chunk compression {compression!r} is not supported here")
        return decompressors[compression](data)

    def _scan_ros1_records(self, bio: BytesIO, known: dict, chunk: tuple) -> None:
        from rosbags.rosbag1.reader import Header, RecordType, read_bytes, read_uint32

        end = len(bio.getbuffer())
        while bio.tell() < end:
            header = Header.read(bio)
            op = header.get_uint8("op")
            size = read_uint32(bio)
            if op == RecordType.CONNECTION:
                self._ros1_connection(header, read_bytes(bio, size), known)
            elif op == RecordType.MSGDATA:
                loc = ("file", chunk[0] + bio.tell(), size) if chunk[2] == "none" else ("chunk", chunk, bio.tell(), size)
                self._index.append((header.get_uint32("conn"), header.get_time("time"), loc))
                bio.seek(size, os.SEEK_CUR)
            else:
                bio.seek(size, os.SEEK_CUR)

    def _ros1_connection(self, header, data: bytes, known: dict) -> None:
        from rosbags.rosbag1.reader import Header, normalize

        cid = header.get_uint32("conn")
        if cid in known:
            return
        fields = Header.read(BytesIO(struct.pack("<I", len(data)) + data))
        conn = SalvagedConnection(cid, normalize(header.get_string("topic")), _ros2_type(fields.get_string("type")),
                                  fields.get_string("message_definition"))
        known[cid] = conn
        self.connections.append(conn)

    def _scan_mcap(self) -> None:
        from rosbags.rosbag2.storage_mcap import decompress

        f = self._f
        f.seek(len(MCAP_MAGIC))
        schemas: dict[int, tuple[str, str]] = {}

        def string(b: BytesIO) -> str:
            (n,) = struct.unpack("<I", b.read(4))
            return b.read(n).decode()

        def records(bio, base, chunk):
            while True:
                pos = bio.tell()
                head = bio.read(9)
                if len(head) == 0:
                    return
                if len(head) < 9:
                    raise EOFError(f"record header cut at byte {base + pos}")
                op, size = head[0], struct.unpack("<Q", head[1:])[0]
                body_pos = bio.tell()
                if op == 0x06 and chunk is None:        # chunk: decompress, walk its records
                    body = bio.read(size)
                    if len(body) < size:
                        raise EOFError("chunk cut")
                    rec = BytesIO(body)
                    _, _, usize, crc = struct.unpack("<QQQI", rec.read(28))
                    compression = string(rec)
                    (csize,) = struct.unpack("<Q", rec.read(8))
                    raw = decompress(rec.read(csize), compression, usize, crc)
                    key = (base + body_pos, size)
                    self._chunk_cache = (key, raw)
                    records(BytesIO(raw), 0, key if compression else (base + body_pos + rec.tell() - csize,))
                    continue
                body = bio.read(size)
                if len(body) < size:
                    raise EOFError(f"record cut at byte {base + pos}")
                rec = BytesIO(body)
                if op == 0x03:       # schema
                    (sid,) = struct.unpack("<H", rec.read(2))
                    name, _enc = string(rec), string(rec)
                    (n,) = struct.unpack("<I", rec.read(4))
                    schemas[sid] = (name, rec.read(n).decode(errors="replace"))
                elif op == 0x04:     # channel
                    cid, sid = struct.unpack("<HH", rec.read(4))
                    topic = string(rec)
                    name, msgdef = schemas.get(sid, ("", ""))
                    if cid not in {c.id for c in self.connections}:
                        self.connections.append(SalvagedConnection(cid, topic, name, msgdef))
                elif op == 0x05:     # message
                    cid, _seq, log_time, _pub = struct.unpack("<HIQQ", rec.read(22))
                    if chunk is None:
                        loc = ("file", base + body_pos + 22, size - 22)
                    elif len(chunk) == 1:       # uncompressed chunk: straight from the file
                        loc = ("file", chunk[0] + body_pos + 22, size - 22)
                    else:
                        loc = ("mcapchunk", chunk, body_pos + 22, size - 22)
                    self._index.append((cid, log_time, loc))
                elif op in (0x02, 0x0F):   # footer, data end: the summary follows, nothing more to replay
                    raise StopIteration

        try:
            records(f, 0, None)
        except StopIteration:
            return
        except (EOFError, struct.error, ValueError, OSError) as exc:
            self._stop(f.tell(), f"record cut or unreadable ({exc})")
        except Exception as exc:  # noqa: BLE001 - a codec error (crc, zstd, lz4) ends the readable part
            self._stop(f.tell(), f"chunk unreadable ({type(exc).__name__}: {exc})")

    def _scan_sqlite(self) -> None:
        head = self._f.read(100)
        page = struct.unpack(">H", head[16:18])[0]
        page = 65536 if page == 1 else page
        declared = page * struct.unpack(">I", head[28:32])[0]
        db_path = self.path
        if declared > self.size:
            # sqlite refuses a file shorter than its header says: read a sparse, padded copy
            self._tmpdir = tempfile.mkdtemp(prefix="vilib_ros_salvage_")
            db_path = Path(self._tmpdir) / self.path.name
            shutil.copyfile(self.path, db_path)
            with open(db_path, "r+b") as g:
                g.truncate(declared)
        self._db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            rows = self._db.execute("SELECT id, name, type FROM topics").fetchall()
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.path}: the bag's topics table is unreadable ({exc})") from None
        defs = {}
        try:
            defs = dict(self._db.execute("SELECT topic_type, encoded_message_definition FROM message_definitions"))
        except sqlite3.DatabaseError:
            pass
        self.connections = [SalvagedConnection(i, n, t, defs.get(t, "")) for i, n, t in rows]
        misses, rowid, last_ok = 0, 0, 0
        while misses < 1000:                 # rows are numbered from 1; stop 1000 past the last readable
            rowid += 1
            try:
                r = self._db.execute("SELECT topic_id, timestamp FROM messages WHERE id = ?", (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                r = None
                self.skipped_rows += 1
            if r is None:
                misses += 1
                continue
            misses, last_ok = 0, rowid
            self._index.append((int(r[0]), int(r[1]), ("row", rowid)))
        self.skipped_rows = max(0, self.skipped_rows - (rowid - last_ok))
        if declared > self.size or self.skipped_rows:
            last = f" up to bag time {max(x[1] for x in self._index)}" if self._index else ""
            self.stopped = (f"the database is cut short ({self.size} of {declared} bytes): {len(self._index)} "
                            f"messages readable{last}" +
                            (f", {self.skipped_rows} rows on missing pages skipped" if self.skipped_rows else ""))
        self._index.sort(key=lambda x: x[1])

    def _raw(self, loc) -> bytes:
        kind = loc[0]
        if kind == "file":
            self._f.seek(loc[1])
            return self._f.read(loc[2])
        if kind == "row":
            return bytes(self._db.execute("SELECT data FROM messages WHERE id = ?", (loc[1],)).fetchone()[0])
        if kind == "chunk":                     # compressed ROS 1 chunk
            chunk = loc[1]
            if self._chunk_cache[0] != chunk:
                self._f.seek(chunk[0])
                self._chunk_cache = (chunk, self._decompress_ros1(chunk[2], self._f.read(chunk[1])))
            return self._chunk_cache[1][loc[2]:loc[2] + loc[3]]
        if kind == "mcapchunk":
            from rosbags.rosbag2.storage_mcap import decompress

            key = loc[1]
            if self._chunk_cache[0] != key:
                self._f.seek(key[0])
                rec = BytesIO(self._f.read(key[1]))
                _, _, usize, crc = struct.unpack("<QQQI", rec.read(28))
                (n,) = struct.unpack("<I", rec.read(4))
                compression = rec.read(n).decode()
                (csize,) = struct.unpack("<Q", rec.read(8))
                self._chunk_cache = (key, decompress(rec.read(csize), compression, usize, crc))
            return self._chunk_cache[1][loc[2]:loc[2] + loc[3]]
        raise ValueError(f"unknown location {loc!r}")

    # ------------------------------------------------------------------ the AnyReader subset
    def _build_typestore(self) -> None:
        from rosbags.typesys import Stores, get_types_from_msg, get_typestore

        self.typestore = get_typestore(Stores.ROS1_NOETIC if self.ros1 else Stores.ROS2_JAZZY)
        for c in self.connections:
            if c.msgtype not in self.typestore.types and c.msgdef:
                try:
                    self.typestore.register(get_types_from_msg(c.msgdef, c.msgtype))
                except Exception:  # noqa: BLE001 - a type we cannot parse is simply not readable
                    pass

    def messages(self, connections=(), start: int | None = None, stop: int | None = None):
        ids = {c.id for c in connections} if connections else None
        by_id = {c.id: c for c in self.connections}
        for cid, t, loc in self._index:
            if ids is not None and cid not in ids:
                continue
            if (start is not None and t < start) or (stop is not None and t >= stop):
                continue
            if cid not in by_id:
                continue
            try:
                raw = self._raw(loc)
            except (sqlite3.DatabaseError, OSError, ValueError, TypeError):
                self.skipped_rows += 1        # its data sits on a page the cut removed
                continue
            yield by_id[cid], t, raw

    def deserialize(self, raw: bytes, msgtype: str):
        if self.ros1:
            return self.typestore.deserialize_ros1(raw, msgtype)
        return self.typestore.deserialize_cdr(raw, msgtype)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if not self._f.closed:
            self._f.close()
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

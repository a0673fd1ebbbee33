"""The HDL frame hand-off's modules (sim/frameport_hdl.py) are the Python stream models
(sim/fastaxis.py) cycle for cycle, on rings small enough that the inject ring's backlog
and both rings' wrap-around are used (sim/frameport_tb.py; Icarus, seconds per run).

* Inject: random frames sent to ``HdlFrameSource`` (64-beat ring) and to
  ``AxiStreamSourceFast`` at the same edges, one random ``tready``: both ports equal at
  every falling edge, frames up to half the ring and up to the cycle-identity bound
  (``rows - 2`` rows, see sim/frameport_tb.py); frames went through the backlog.
* Capture: an ``AxiStreamSourceFast`` with random pauses into the capture module
  (128-beat ring) and, alongside, an ``AxiStreamSinkFast``: same ``tready`` at every falling
  edge, same frames at the same edges; a frame of one beat more than the ring raises.
* ``HdlFrameSource.send_nowait`` refuses a frame longer than its ring (and an empty one)
  without queuing anything, and cuts the frames it takes into rows as the source would.
"""

import pytest

from mrcnic.sim.rtlsim import run_rtl

TOP = "frameport_pair"


def _run(tmp_path, testcase, **env):
    from mrcnic.sim.frameport_hdl import frameport_verilog
    from mrcnic.sim.frameport_tb import CAPTURE_TEST_AW, INJECT_TEST_AW, FramePortPair

    run_rtl(FramePortPair(INJECT_TEST_AW, CAPTURE_TEST_AW), toplevel=TOP,
            test_module="mrcnic.sim.frameport_tb", testcase=testcase, build_dir=tmp_path,
            env=env, sources=[frameport_verilog()], simulator="icarus", quiet=True,
            cache_key=f"FramePortPair-{INJECT_TEST_AW}-{CAPTURE_TEST_AW}")


@pytest.mark.parametrize("seed,max_len", [(1, 200), (2, 384)])
def test_inject_matches_python_source(tmp_path, seed, max_len):
    from mrcnic.sim.frameport_tb import INJECT_TEST_AW, inject_max_bytes

    assert max_len <= inject_max_bytes(INJECT_TEST_AW) == 384
    _run(tmp_path, "inject_matches_python_source", seed=seed, max_len=max_len, frames=400)


@pytest.mark.parametrize("seed", [1, 2])
def test_capture_matches_python_sink(tmp_path, seed):
    _run(tmp_path, "capture_matches_python_sink", seed=seed, frames=300)


class _Handle:
    """A stand-in for a cocotb handle (``._handle`` is itself): reads a fixed value,
    records writes."""

    def __init__(self, value=0, width=32):
        self._handle, self.value, self.width, self.writes = self, value, width, []

    def __len__(self):
        return self.width

    def get_signal_val_binstr(self):
        return format(self.value, f"0{self.width}b")

    def set_signal_val_binstr(self, action, v):
        self.writes.append(int(v, 2))

    def set_signal_val_int(self, action, v):
        self.writes.append(v)

    def get_handle_by_index(self, i):
        return self.rows.setdefault(i, _Handle(width=0))


class _Inject:
    """The handles ``HdlFrameSource`` takes of an inject module instance."""

    def __init__(self):
        self.ring = _Handle()
        self.ring.rows = {}
        self.rp, self.taken, self.active, self.queued = (_Handle(), _Handle(), _Handle(0, 1),
                                                         _Handle())


def _source(aw):
    from mrcnic.sim.frameport_hdl import HdlFrameSource

    inst = _Inject()
    src = HdlFrameSource(inst, aw=aw)
    src._queued_w = lambda v: inst.queued.writes.append(v)    # no simulator to schedule on
    return inst, src


@pytest.mark.parametrize("aw", [6, 10])
def test_inject_refuses_frames_longer_than_the_ring(aw):
    from mrcnic.sim.frameport_tb import inject_max_bytes

    inst, src = _source(aw)
    for n in (inject_max_bytes(aw) + 1, inject_max_bytes(aw) + 64, 1 << (aw + 3), 0):
        with pytest.raises(ValueError):
            src.send_nowait(bytes(n))
    assert (src.queued, src.wp, len(src.backlog)) == (0, 0, 0)
    assert not any(r.writes for r in inst.ring.rows.values())    # no row written
    src.send_nowait(bytes(inject_max_bytes(aw)))             # the longest: rows - 2 rows
    assert src.queued == 1 and inst.queued.writes == [1] and not src.backlog
    assert src.wp == (1 << aw) - 16


def test_inject_rows_and_backlog():
    """A frame's rows carry its bytes, ``tkeep`` and ``tlast`` as the Python source cuts
    them; a frame that does not fit waits in the backlog until ``rp`` frees its rows."""
    from mrcnic.sim.frameport_hdl import DATA_WIDTH, LANES, ROW_BEATS

    inst, src = _source(6)                   # 8 rows of 8 beats
    frame = bytes(range(1, 141))             # 140 bytes: 18 beats, 3 rows, 4 lanes at the end
    src.send_nowait(frame)
    rows = [inst.ring.rows[i].writes[-1] for i in range(3)]
    data, keep, last = bytearray(), [], []
    for v in rows:
        for b in range(ROW_BEATS):
            d = v >> (b * DATA_WIDTH) & ((1 << DATA_WIDTH) - 1)
            k = v >> (ROW_BEATS * DATA_WIDTH + b * LANES) & 0xFF
            keep.append(k)
            last.append(v >> (ROW_BEATS * (DATA_WIDTH + LANES) + b) & 1)
            data += bytes(x for i, x in enumerate(d.to_bytes(LANES, "little")) if k >> i & 1)
    assert bytes(data) == frame
    assert keep[:17] == [0xFF] * 17 and keep[17] == 0x0F and keep[18:] == [0] * 6
    assert last.index(1) == 17 and sum(last) == 1
    src.send_nowait(bytes(300))              # 5 rows: 3 + 5 > 7, waits
    assert src.waiting() and src.queued == 1 and not src.idle()
    src.refill()
    assert src.waiting()
    inst.rp.value = 16                       # two rows driven: 1 row in use, room for 6
    src.refill()
    assert not src.waiting() and src.queued == 2 and inst.queued.writes == [1, 2]
    assert src.wp == (24 + 40) % 64          # the ring wrapped

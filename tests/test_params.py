"""NicParams (rtl/params.py): every rule with its message, the derived widths, and the
shared checks the blocks and the register map use."""

import dataclasses
import gc
import re
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable

from mrcnic.rtl import params as P
from mrcnic.rtl.params import NicParams, param


@pytest.fixture(autouse=True)
def _quiet_unused():
    """Components built here are never elaborated."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        yield
        gc.collect()


def test_defaults_are_mrcnic_defaults():
    p = NicParams()
    assert (p.ports, p.qps, p.paths, p.window, p.data_width, p.clk_ns, p.clock_mhz,
            p.plane_guard, p.shared_parser, p.regions) == (4, 2, 256, 256, 64, 8, 125, 3, False, 4)


def test_frozen():
    p = NicParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.ports = 2
    assert p.replace(ports=2).ports == 2 and p.ports == 4
    with pytest.raises(ValueError, match="ports"):
        p.replace(ports=0)


# (parameter, good values, bad values, message fragment of a bad value)
RULES = [
    ("ports", [1, 2, 8], [0, 9, -1], "ports must be 1..8 (planes), not {v}"),
    ("qps", [1, 4, 8], [0, 9], "qps must be 1..8 (QP contexts), not {v}"),
    ("paths", [16, 32, 64, 128, 256], [0, 1, 8, 15, 17, 48, 100, 255, 512],
     "paths must be a power of two in 16..256 (path-table entries), not {v}"),
    ("window", [64, 128, 256, 4096], [0, 32, 63, 100, 8192],
     "window must be a power of two in 64..4096 (PSNs), not {v}"),
    ("clk_ns", [1, 8, 16, 1000], [0, 1001], "clk_ns must be 1..1000 (ns, the core clock period), not {v}"),
    ("clock_mhz", [1, 62, 125, 1023], [0, 1024], "clock_mhz must be 1..1023 (MHz), not {v}"),
    ("plane_guard", [0, 2, 3, 15], [1, 16, -1],
     "plane_guard must be 0 (off) or 2..15 (ACK timeouts), not {v}"),
    ("regions", [1, 4, 16], [0, 17], "regions must be 1..16 (memory regions), not {v}"),
]


@pytest.mark.parametrize("name,good,bad,msg", RULES, ids=[r[0] for r in RULES])
def test_rules(name, good, bad, msg):
    for v in good:
        assert getattr(NicParams(**{name: v}), name) == v
    for v in bad:
        with pytest.raises(ValueError, match=re.escape(msg.format(v=v))):
            NicParams(**{name: v})


@pytest.mark.parametrize("name", ["ports", "qps", "paths", "window", "data_width", "clk_ns",
                                  "clock_mhz", "plane_guard", "regions"])
@pytest.mark.parametrize("value", [2.0, "4", True, None])
def test_integers_only(name, value):
    with pytest.raises(ValueError, match=re.escape(f"{name} must be an integer, not {value!r}")):
        NicParams(**{name: value})


def test_data_width_64_only():
    assert NicParams(data_width=64).data_width == 64
    for dw in (8, 32, 128, 512):
        with pytest.raises(ValueError, match=rf"data_width must be 64 \(bits\), not {dw}: "
                                             r"the datapath .* is 64-bit today"):
            NicParams(data_width=dw)


def test_shared_parser_bool():
    assert NicParams(shared_parser=True).shared_parser is True
    for v in (1, 0, "yes", None):
        with pytest.raises(ValueError, match="shared_parser must be True or False"):
            NicParams(shared_parser=v)


@pytest.mark.parametrize("paths,bits", [(16, 4), (32, 5), (64, 6), (128, 7), (256, 8)])
def test_path_bits(paths, bits):
    assert NicParams(paths=paths).path_bits == bits


@pytest.mark.parametrize("window,bits", [(64, 6), (128, 7), (256, 8), (4096, 12)])
def test_window_bits(window, bits):
    assert NicParams(window=window).window_bits == bits


@pytest.mark.parametrize("n,bits", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3)])
def test_index_bits(n, bits):
    p = NicParams(ports=n, qps=n)
    assert p.port_bits == bits and p.qp_bits == bits


@pytest.mark.parametrize("regions,bits", [(1, 1), (2, 1), (4, 2), (8, 3), (16, 4)])
def test_region_bits(regions, bits):
    assert NicParams(regions=regions).region_bits == bits


def test_data_bytes_and_shared():
    assert NicParams().data_bytes == 8
    assert NicParams(ports=2, shared_parser=True).shared
    assert not NicParams(ports=1, shared_parser=True).shared       # one plane: nothing to share
    assert not NicParams(ports=2).shared


def test_of():
    # keywords only: NicParams defaults, then the caller's defaults, then the keywords
    assert NicParams.of(ports=None, qps=None) == NicParams()
    assert NicParams.of(defaults={"ports": 2}, ports=None).ports == 2
    assert NicParams.of(defaults={"ports": 2}, ports=3).ports == 3
    p = NicParams(ports=2, qps=1, paths=16, window=128)
    # a set: returned as is; keywords that agree are fine, a contradiction is not
    assert NicParams.of(p, ports=None, qps=None) is p
    assert NicParams.of(p, defaults={"ports": 4}, ports=2, paths=16) is p
    with pytest.raises(ValueError, match=r"paths=32 contradicts params.paths=16"):
        NicParams.of(p, paths=32)
    with pytest.raises(ValueError, match="params must be a NicParams, not dict"):
        NicParams.of({"ports": 2})
    with pytest.raises(TypeError, match="unknown NIC parameters: lanes"):
        NicParams.of(lanes=4)


def test_param():
    p = NicParams(qps=4)
    assert param(None, "qps", None, 8) == 8
    assert param(None, "qps", 3, 8) == 3
    assert param(p, "qps", None, 8) == 4
    assert param(p, "qps", 4, 8) == 4
    with pytest.raises(ValueError, match=r"qps=2 contradicts params.qps=4"):
        param(p, "qps", 2, 8)


def test_check_paths_minimum():
    """Blocks that hold no path table (reliability, plane guard) take fewer entries."""
    assert P.check_paths(4, minimum=1) == 4
    with pytest.raises(ValueError, match=r"paths must be a power of two in 1..256"):
        P.check_paths(12, minimum=1)
    with pytest.raises(ValueError, match=r"depth must be a power of two in 16..256"):
        P.check_paths(8, "depth")


def test_check_port():
    assert P.check_port(0) == 0 and P.check_port(7) == 7
    with pytest.raises(ValueError, match=r"port must be 0..7 \(plane number\), not 8"):
        P.check_port(8)


# ---- the NIC and its blocks use these rules -------------------------------------------------
def test_nic_takes_params():
    from mrcnic.rtl.csr_nic import CsrNic
    from mrcnic.rtl.nic import MRCNic
    p = NicParams(ports=2, qps=1, paths=16, window=128, shared_parser=True, clk_ns=16,
                  clock_mhz=62)
    nic = MRCNic(params=p)
    assert nic.params is p and (nic.ports, nic.qps, nic.paths, nic.window) == (2, 1, 16, 128)
    assert MRCNic(ports=2, qps=1, paths=16, window=128, shared_parser=True, clk_ns=16,
                  plane_guard=3).params == p.replace(clock_mhz=125)
    csr = CsrNic(params=p)
    assert csr.params is p and csr.core.params is p
    assert csr.regmap.params["clock_mhz"] == 62
    # CsrNic's own default: two planes
    assert CsrNic().params == NicParams(ports=2)
    assert CsrNic(ports=2, qps=1, paths=16, window=128, clock_mhz=62, regions=4,
                  shared_parser=True, clk_ns=16).params == p
    with pytest.raises(ValueError, match="ports=4 contradicts params.ports=2"):
        CsrNic(params=p, ports=4)


@pytest.mark.parametrize("kw,msg", [
    (dict(ports=9), "ports must be 1..8 (planes), not 9"),
    (dict(paths=48), "paths must be a power of two in 16..256"),
    (dict(window=8192), "window must be a power of two in 64..4096"),     # was allowed by MRCNic
    (dict(plane_guard=1), "plane_guard must be 0 (off) or 2..15"),
    (dict(clk_ns=0), "clk_ns must be 1..1000"),
])
def test_nic_bad_parameters(kw, msg):
    from mrcnic.rtl.csr_nic import CsrNic
    from mrcnic.rtl.nic import MRCNic
    for cls in (MRCNic, CsrNic):
        with pytest.raises(ValueError, match=re.escape(msg)):
            cls(**kw)


def test_blocks_share_the_rules():
    """Rules that differed before: TxPipeline took paths 1..256, RxPipeline checked neither
    qps nor window, MRCNic took any power-of-two window >= 64."""
    from mrcnic.rtl.ack_gen import AckGen
    from mrcnic.rtl.ev_counters import EvCounterBank
    from mrcnic.rtl.frame_merge import FrameMerge
    from mrcnic.rtl.header_gen import HeaderGen
    from mrcnic.rtl.path_table import PathTable
    from mrcnic.rtl.plane_guard import PlaneGuard
    from mrcnic.rtl.reliability import SenderReliability
    from mrcnic.rtl.rx import RxPipeline
    from mrcnic.rtl.rx_arbiter import RxArbiter
    from mrcnic.rtl.rx_parser import RxParser
    from mrcnic.rtl.sack_tracker import SackTracker
    from mrcnic.rtl.segmenter import Segmenter
    from mrcnic.rtl.spray import SprayScheduler
    from mrcnic.rtl.tx import TxPipeline
    bad_ports = "ports must be 1..8 (planes), not 9"
    bad_qps = "qps must be 1..8 (QP contexts), not 9"
    bad_window = "window must be a power of two in 64..4096 (PSNs), not 100"
    for make, msg in [
        (lambda: AckGen(ports=9), bad_ports), (lambda: AckGen(qps=9), bad_qps),
        (lambda: FrameMerge(9), bad_ports), (lambda: HeaderGen(ports=9), bad_ports),
        (lambda: RxArbiter(ports=9), bad_ports), (lambda: TxPipeline(ports=9), bad_ports),
        (lambda: RxPipeline(ports=9), bad_ports), (lambda: PlaneGuard(ports=9), bad_ports),
        (lambda: RxParser(port=None, ports=9), bad_ports),
        (lambda: RxParser(qps=9), bad_qps), (lambda: Segmenter(qps=9), bad_qps),
        (lambda: SackTracker(qps=9), bad_qps), (lambda: SenderReliability(qps=9), bad_qps),
        (lambda: RxPipeline(qps=9), bad_qps), (lambda: TxPipeline(qps=9), bad_qps),
        (lambda: SackTracker(window=100), bad_window),
        (lambda: SenderReliability(window=100), bad_window),
        (lambda: RxPipeline(window=100), bad_window),
        (lambda: TxPipeline(paths=8), "paths must be a power of two in 16..256"),
        (lambda: EvCounterBank(8), "paths must be a power of two in 16..256"),
        (lambda: PathTable(8), "depth must be a power of two in 16..256"),
        (lambda: SprayScheduler(100), "depth must be a power of two in 16..256"),
        (lambda: PlaneGuard(threshold=1), "threshold must be 0 (off) or 2..15"),
        (lambda: RxParser(port=8), "port must be 0..7 (plane number), not 8"),
        (lambda: RxParser(regions=17), "regions must be 1..16 (memory regions), not 17"),
    ]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            make()


def test_blocks_take_params():
    from mrcnic.rtl.reliability import SenderReliability
    from mrcnic.rtl.rx import RxPipeline
    from mrcnic.rtl.spray import SprayScheduler
    from mrcnic.rtl.tx import TxPipeline
    p = NicParams(ports=2, qps=1, paths=32, window=128, clk_ns=16)
    rel = SenderReliability(params=p)
    assert (rel.qps, rel.window, rel.paths, rel.clk_ns) == (1, 128, 32, 16)
    assert SprayScheduler(params=p).depth == 32
    assert "m_axis_p1" in TxPipeline(params=p).signature.members
    assert "m_axis_p2" not in RxPipeline(params=p).signature.members
    with pytest.raises(ValueError, match="paths=64 contradicts params.paths=32"):
        SprayScheduler(64, params=p)


def test_regmap_shares_the_rules():
    from mrcnic.regmap import build_regmap
    with pytest.raises(ValueError, match=re.escape("window must be a power of two in 64..4096")):
        build_regmap(window=1000)
    with pytest.raises(ValueError, match=re.escape("paths must be a power of two in 16..256")):
        build_regmap(paths=48)
    with pytest.raises(ValueError, match=re.escape("clock_mhz must be 1..1023 (MHz), not 0")):
        build_regmap(clock_mhz=0)

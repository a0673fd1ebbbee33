"""``mrcnic bench tx|rx``: the datapaths run at one beat per clock (the performance
target, README "Transmit throughput": zero idle cycles between back-to-back frames of any size, SRH included).

Cycle counts from the cycle-accurate benches (not wall-clock time): every row must reach
beats == cycles.  The README's throughput tables are these rows.
"""

from mrcnic.sim.bench import PAYLOADS, bench_rx, bench_tx


def test_bench_tx_line_rate(tmp_path):
    # 24 back-to-back frames per case, as the receive test (the command's default is 48)
    rows = bench_tx(packets=24, build_dir=tmp_path)
    assert [(r["payload"], r["srh"]) for r in rows] == [(p, s) for p in PAYLOADS
                                                         for s in (False, True)]
    for r in rows:
        assert r["beats"] == r["cycles"], r


def test_bench_rx_line_rate(tmp_path):
    # bench_rx itself raises unless every frame was taken and every byte placed once
    rows = bench_rx(packets=24, build_dir=tmp_path)
    assert [r["payload"] for r in rows] == list(PAYLOADS)
    for r in rows:
        assert r["beats"] == r["cycles"], r

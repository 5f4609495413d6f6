"""The simulator's high-water marks: what a periodic scrape could miss, the model keeps."""

from pagegate.sim.model import ServerModel
from pagegate.sim.profiles import get_server_profile


def test_peak_waiting_and_kv_are_high_water_marks() -> None:
    profile = get_server_profile("ci")
    model = ServerModel(profile, start=0.0)
    for i in range(20):
        model.submit(f"r{i}", prompt_tokens=1800, output_tokens=50, max_tokens=100, now=0.0)
    burst = model.snapshot()
    assert burst.peak_waiting == burst.waiting > 0
    t = 0.0
    while model.in_flight():
        nxt = model.next_event_at()
        assert nxt is not None
        t = nxt
        model.advance(t)
    done = model.snapshot()
    assert done.waiting == 0 and done.kv_usage == 0.0
    assert done.peak_waiting == burst.peak_waiting
    # ci is slot-bound: at least max_num_seqs prompts were resident at once
    min_blocks = profile.max_num_seqs * -(-1800 // profile.block_size)
    assert min_blocks / profile.num_gpu_blocks <= done.peak_kv_usage <= 1.0

import sys
import types

import pytest

from tasks.core import arrays
from tasks.core.stages import evaluate as ev


class Pool:  # CuPy's pool in miniature: blocks of arrays gone stay held until free_all_blocks
    def __init__(self, held: int):
        self.held, self.freed = held, 0

    def total_bytes(self) -> int:
        return self.held

    def free_all_blocks(self) -> None:
        self.freed += 1
        self.held = 0


def fake_gpu_modules(monkeypatch, cupy_held=33 * 2**30, torch_reserved=2 * 2**30, torch_up=True):
    device, pinned = Pool(cupy_held), Pool(0)
    cupy = types.SimpleNamespace(get_default_memory_pool=lambda: device, get_default_pinned_memory_pool=lambda: pinned)
    state = {"reserved": torch_reserved, "emptied": 0}

    def empty_cache():
        state["emptied"] += 1
        state["reserved"] = 0

    cuda = types.SimpleNamespace(
        is_initialized=lambda: torch_up, memory_reserved=lambda: state["reserved"], empty_cache=empty_cache
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    return device, pinned, state


def test_the_pools_hand_back_what_arrays_no_longer_use(monkeypatch):
    device, pinned, torch_state = fake_gpu_modules(monkeypatch)
    assert arrays.release_gpu_memory() == {"cupy": 33 * 2**30, "torch": 2 * 2**30}
    assert (device.freed, pinned.freed, torch_state["emptied"]) == (1, 1, 1)


def test_nothing_is_imported_or_touched_where_no_gpu_library_was_loaded(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert arrays.release_gpu_memory() == {"cupy": 0, "torch": 0}
    assert "cupy" not in sys.modules and "torch" not in sys.modules
    _, _, torch_state = fake_gpu_modules(monkeypatch, torch_up=False)  # torch without a CUDA context: left alone
    assert arrays.release_gpu_memory()["torch"] == 0 and torch_state["emptied"] == 0


@pytest.mark.parametrize("fails", [False, True])
def test_evaluation_hands_its_gpu_memory_back_when_it_ends_or_fails(monkeypatch, tmp_path, fails):
    released = []
    monkeypatch.setattr(ev, "release_gpu_memory", lambda: released.append(True) or {"cupy": 0, "torch": 0})
    monkeypatch.setattr(ev.Topology, "read", staticmethod(lambda path: None))

    def evaluate(*args):
        if fails:
            raise MemoryError("out of GPU memory")
        raise StopIteration("stops the stage after evaluation, before plotting")  # only the release is asserted

    monkeypatch.setattr(ev, "evaluate", evaluate)
    with pytest.raises(MemoryError if fails else StopIteration):
        ev.evaluate_stage(tmp_path, tmp_path, [], None, 0, tmp_path)
    assert released == [True]


def test_the_train_task_frees_the_flow_processs_pools_before_its_ranks_start(monkeypatch, tmp_path):
    import tasks.train as train

    calls = []
    monkeypatch.setattr(train, "release_gpu_memory", lambda: calls.append("release") or {"cupy": 2**30, "torch": 0})
    monkeypatch.setattr(train, "_warm_start", lambda cfg, warm, features, inputs: cfg)

    def run_stage(*args, **kwargs):
        calls.append("run_stage")  # the ranks launch inside
        raise StopIteration("only the order is asserted")

    monkeypatch.setattr(train, "run_stage", run_stage)
    features = types.SimpleNamespace(fingerprint="f" * 20)
    cfg = train.TrainConfig()
    with pytest.raises(StopIteration):
        train.train_task.fn(features, cfg, 0.2, types.SimpleNamespace(device="cuda"), tmp_path)
    assert calls == ["release", "run_stage"]

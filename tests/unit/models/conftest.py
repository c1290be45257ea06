import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    # The models here are a few thousand parameters wide: a second intra-op thread buys nothing,
    # and on a shared 2-core machine it costs up to 10x (each op waits for a descheduled thread).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

"""Per-example set-up of the sphinx-gallery examples (named in ``sphinx_gallery_conf["reset_modules"]``)."""


def one_torch_thread(gallery_conf, fname):
    """Run every example on one intra-op thread.

    The examples' tensors are tiny: on a shared two-core machine more threads only add contention, which
    made single steps up to tens of times slower and the reported timings noisy.
    """
    import torch

    torch.set_num_threads(1)

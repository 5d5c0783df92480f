"""`VariableFacts`: what placement knows about one trainable variable."""

import dataclasses

USES = ("unseen", "gathered", "whole")


@dataclasses.dataclass(frozen=True)
class VariableFacts:
    """What the strategy has seen of a variable, for `make_plan`.

    Attributes:
        path: String. Unique path; the key `variable_kinds` takes.
        shape: Tuple of ints.
        dtype_size: Int. Bytes per element.
        candidate: Boolean. Created as a provisional table: big enough
            that partitioning could pay, with rows for every shard.
        use: String, one of `USES`: not yet seen in a traced step, read
            only through gathers, or read whole somewhere.
        lookups: Int or None. Ids gathered per worker and step.
        whole_reader: String. What read it whole (`use == "whole"`).
        blocker: String. Why it cannot be partitioned whatever its use
            (for example a regularizer that is not row by row), or "".
        keras_path: String. The Keras path, if `path` had to be made
            unique (`path` then ends in `#k`); overrides match it too.
    """

    path: str
    shape: tuple
    dtype_size: int
    candidate: bool = False
    use: str = "unseen"
    lookups: int | None = None
    whole_reader: str = ""
    blocker: str = ""
    keras_path: str = ""

    @property
    def bytes(self) -> int:
        size = self.dtype_size
        for d in self.shape:
            size *= d
        return size

    @property
    def row_bytes(self) -> int:
        return self.bytes // max(1, self.shape[0]) if self.shape else 0

    def describe(self) -> str:
        """What the variable is, in words a Keras user knows: "a table read
        by gathers", "a Dense kernel", "a bias"."""
        if self.use == "gathered":
            return "a table read by gathers"
        name = self.path.split("#")[0].rsplit("/", 1)[-1]
        rank = len(self.shape)
        if name == "kernel":
            return _KERNELS.get(min(rank, 4), "a kernel")
        if name in _NAMES:
            return _NAMES[name]
        return f"a {rank}-d weight" if rank else "a scalar weight"


_NAMES = {
    "embeddings": "an embedding table",
    "bias": "a bias",
    "recurrent_kernel": "a recurrent kernel",
    "depthwise_kernel": "a convolution kernel",
    "pointwise_kernel": "a convolution kernel",
    "gamma": "a normalization scale",
    "beta": "a normalization offset",
}
_KERNELS = {
    2: "a Dense kernel",
    3: "an EinsumDense kernel",
    4: "a convolution kernel",
}

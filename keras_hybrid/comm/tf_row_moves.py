"""`RowMoves`: `TFCommunicator`'s row moves whose counts every worker
knows (resizes, buddy copies): only the pairs that move rows talk, each
in its 2-member group (`pair_moves`), and the pairwise all-to-all's sends
and receives."""

import numpy as np
import tensorflow as tf

from keras_hybrid._compat import tf as tf_compat
from keras_hybrid.comm import capacity
from keras_hybrid.comm import instance_keys
from keras_hybrid.comm import padded_blocks
from keras_hybrid.comm import pair_moves

# Group keys of the 2-member groups of the pairwise all-to-all: above the
# elastic groups' keys, below an elastic job's pair groups
# (contract/elastic_board.py).
_PAIR_GROUP_BASE = 1 << 24


class RowMoves:
    """Mixed into `TFCommunicator`, whose state these methods use."""

    def move_rows(self, tensor, matrix, path="control"):
        """See `Communicator.move_rows`. Only the pairs that move rows
        talk, each block padded to its own count's ladder step, in the
        pair's 2-member group (`pair_moves`); eager only. With
        `exchange="padded"`, one `AllToAllV2` padded to the largest count.
        """
        if self.exchange == "padded" or self.size == 1:
            return super().move_rows(tensor, matrix, path)
        if not tf.executing_eagerly():
            raise RuntimeError(
                "`move_rows` runs eagerly (between steps). Received a call "
                "inside a `tf.function`; use `all_to_all` there."
            )
        matrix = np.asarray(matrix, np.int64)
        received = self._move_pairwise(tf.convert_to_tensor(tensor), matrix)
        self._charge_move(path, tensor, matrix)
        return received, self.move_wire_rows(matrix)

    def move_wire_rows(self, matrix) -> int:
        matrix = np.asarray(matrix, np.int64)
        if self.exchange == "padded":
            cap = int(capacity.capacity_for(tf.constant(int(matrix.max()))))
            return self.size * (self.size - 1) * cap if matrix.any() else 0
        return pair_moves.wire_rows(matrix)

    def _move_pairwise(self, tensor, matrix) -> tf.Tensor:
        """The eager sends and receives of `move_rows`, in
        `pair_moves.move_schedule` order; the rows received, by source."""
        rank, size = self.rank, self.size
        content = "move_rows/" + instance_keys.describe([tensor], True)
        blocks = tf.split(tensor, [int(c) for c in matrix[rank]], num=size)
        received = [blocks[rank][:0] for _ in range(size)]
        received[rank] = blocks[rank]
        for kind, peer in pair_moves.move_schedule(rank, matrix):
            src, dst = (rank, peer) if kind == "send" else (peer, rank)
            base = self._keys.base_key(f"{content}/{src}>{dst}")
            key, cap = self._pair_key(base, int(matrix[src, dst]))
            if kind == "send":
                self._pair_send(
                    padded_blocks.pad_rows(blocks[peer], cap), peer, key
                )
            else:
                shape = tf.concat([[cap], tf.shape(tensor)[1:]], 0)
                padded = self._pair_recv(shape, tensor.dtype, peer, key)
                received[peer] = padded[: matrix[src, dst]]
        return tf.concat(received, axis=0)

    def _charge_move(self, path, tensor, matrix) -> None:
        blocks = pair_moves.block_rows(matrix)
        rank = self.rank
        sent = int(matrix[rank].sum() - matrix[rank, rank])
        got = int(matrix[:, rank].sum() - matrix[rank, rank])
        self._charge_rows(
            path,
            tensor,
            (sent, int(blocks[rank].sum()) - sent),
            (got, int(blocks[:, rank].sum()) - got),
        )

    def _pair_key(self, base: int, count) -> tuple:
        """`(instance key, rows)` of one pair's block, never empty
        (`capacity.pair_capacity`); each bucket keeps its own key, so a
        key always carries one shape."""
        index = capacity.bucket_index(count)
        return base + index, capacity.pair_capacity(index)

    def _pair_group(self, peer: int) -> int:
        """Group key of the 2-member group of this worker and `peer`; in an
        elastic job, of their tasks in the current generation
        (`ElasticMembership.pair_group_key`), so no key is used by two
        groups."""
        if self.membership is not None:
            return self.membership.pair_group_key(self.rank, peer)
        low, high = min(self.rank, peer), max(self.rank, peer)
        return _PAIR_GROUP_BASE + low * self.size + high

    def _pair_send(self, tensor, peer, key):
        return tf_compat.broadcast_send(
            tensor,
            group_size=2,
            group_key=self._pair_group(peer),
            instance_key=key,
            timeout=self._op_timeout(),
        )

    def _pair_recv(self, shape, dtype, peer, key):
        return tf_compat.broadcast_recv(
            shape,
            dtype=dtype,
            group_size=2,
            group_key=self._pair_group(peer),
            instance_key=key,
            timeout=self._op_timeout(),
        )

"""Times giving one commit's blob to a buddy on the same host, the two ways
the buddy store can: mapped (the buddy maps the member's shared-memory
buffer) and streamed (the blob over loopback TCP into the buddy's
buffer, as to a buddy on another host), side by side in one run.

```sh
python -m examples.elastic.buddy_give
```

The defaults are one member's shard of `measure_commit.py --vocab=50000
--embedding_dim=64` on 2 workers: 25000 rows of 64 float32 and two Adam
slots (19.2 MB). The buddy's `BuddyReceiver` runs in another process.
Each way prints the medians over `--repeats` of: the wall time of
`send_copy`, the CPU time of the sending thread, and the CPU time of the
receiving process; the member's own copy into its buffer (the same both
ways, on the training thread) is printed once.
"""

import multiprocessing
import time

import numpy as np
from absl import app
from absl import flags

from keras_hybrid.contract import commit_blob
from keras_hybrid.contract.buddy_receiver import BuddyReceiver
from keras_hybrid.contract.buddy_receiver import send_copy
from keras_hybrid.contract.shared_memory import SharedBuffer
from keras_hybrid.contract.tcp_service import TcpClient

FLAGS = flags.FLAGS
flags.DEFINE_integer("rows", 25000, "Rows of the shard of the table.")
flags.DEFINE_integer("dim", 64, "Width of its rows (float32).")
flags.DEFINE_integer("repeats", 15, "Copies given each way.")


def _buddy(conn) -> None:
    """The buddy's process: a receiver; answers each message with its
    CPU time so far."""
    receiver = BuddyReceiver("localhost", bind="127.0.0.1")
    conn.send((receiver.address, receiver.authkey))
    while conn.recv() is not None:
        conn.send(time.process_time())


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    table = rng.random((FLAGS.rows, FLAGS.dim), dtype=np.float32)
    arrays = [table, table * 2, table * 3]
    size = commit_blob.blob_layout(arrays)[1]
    # Three buffers in turn, as a member with two kept commits and one a
    # buddy may still map.
    buffers = [SharedBuffer.create(size) for _ in range(3)]
    ours, theirs = multiprocessing.Pipe()
    buddy = multiprocessing.Process(target=_buddy, args=(theirs,), daemon=True)
    buddy.start()
    address, authkey = ours.recv()
    client = TcpClient(address, authkey)
    fills = []
    print(f"blob: {size / 1e6:.1f} MB, {FLAGS.repeats} copies each way")
    print(
        f"{'way':10s} {'wall ms':>8s} {'sender CPU ms':>14s} "
        f"{'buddy CPU ms':>13s}"
    )
    for way in ("mapped", "streamed"):
        walls, sender, receiver = [], [], []
        for i in range(FLAGS.repeats):
            buffer = buffers[i % len(buffers)]
            start = time.perf_counter()
            commit_blob.fill_blob(buffer.map, arrays)
            fills.append(time.perf_counter() - start)
            ours.send(True)
            before = ours.recv()
            cpu, start = time.thread_time(), time.perf_counter()
            send_copy(
                client,
                1,
                f"commit-{i}-{way}",
                buffer.map,
                [f"commit-{i - 1}-{way}"],
                shared=buffer if way == "mapped" else None,
            )
            walls.append(time.perf_counter() - start)
            sender.append(time.thread_time() - cpu)
            ours.send(True)
            receiver.append(ours.recv() - before)
        print(
            f"{way:10s} {1e3 * np.median(walls):8.2f} "
            f"{1e3 * np.median(sender):14.2f} "
            f"{1e3 * np.median(receiver):13.2f}"
        )
    print(
        f"the member's own copy into its buffer: "
        f"{1e3 * np.median(fills):.2f} ms (both ways)"
    )
    ours.send(None)
    buddy.join(10)


if __name__ == "__main__":
    app.run(main)

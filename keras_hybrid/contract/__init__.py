"""The contract between the launcher and its workers, without TensorFlow.

What `keras-hybrid-run` writes and the workers read: the environment of
each worker (`worker_env`), the elastic board of plans and recoveries
(`elastic_board`, carried by `plan_channel` over files or TCP), and the
commit store of partitioned tables (`commit_files`, `commit_blob`,
`commit_server` over `tcp_service` and `blob_stream`), and the buddy
copies that workers send each other (`buddy_receiver`). Both sides import
it, so it imports nothing of the package and no TensorFlow.
"""

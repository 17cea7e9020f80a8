"""Python modules generated from ``proto/tjobs/callback/v1/receiver.proto`` (do not edit them by hand).

``receiver_pb2`` holds the messages (``FireRequest``, ``FireReply``), ``receiver_pb2_grpc`` the
``Receiver`` stub, servicer and ``add_ReceiverServicer_to_server``; the ``.pyi`` files beside them
type both. ``bash scripts/gen_proto.sh`` regenerates all four after a change to the ``.proto``.
"""

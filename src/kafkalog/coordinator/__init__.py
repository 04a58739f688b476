"""Coordinators: the broker-side state machines kept in internal topics (the group coordinator over
``__consumer_offsets``, the transaction coordinator over ``__transaction_state``).

They sit between the manager and the broker (record <- storage <- partition <- manager <- coordinators <- broker):
they read and write their topics through the replica manager, keep their time with a clock object and their
timers on a scheduler, and know nothing of sockets or of the wire protocol's encoding.
"""

"""The front end's reply clock tested alone: ``clock.test.mjs`` beside this file, under
node's own test runner (``node --test``), as the event-stream reader is
(``test_stream_reader.py``). Node is required, not optional: where it is missing this
fails and says how to install it (.ci/run does)."""

from ._node import passes_node_tests


def test_the_reply_clock_passes_its_node_tests():
    passes_node_tests("clock.test.mjs")

"""The front end's event-stream reader tested alone: ``stream_reader.test.mjs`` beside
this file, under node's own test runner (``node --test``), so the suite's one command
runs it too. Node is required, not optional: where it is missing this fails and says
how to install it (.ci/run does)."""

from ._node import passes_node_tests


def test_the_stream_reader_passes_its_node_tests():
    passes_node_tests("stream_reader.test.mjs")

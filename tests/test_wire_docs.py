"""docs/reference/wire.md's producer example, run as written: rankstream decodes what it sends."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from rankstream.stream.click_schema import Click, decode_clicks
from rankstream.stream.schema import decode_triplets

WIRE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "wire.md"


def test_the_documented_producer_writes_a_message_rankstream_reads():
    blocks = re.findall(r'```python title="A triplets producer"\n(.*?)```', WIRE.read_text(), re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], str(WIRE), "exec"), scope)
    block = decode_triplets(scope["value"])
    assert block.rejects == [] and scope["key"] == b"4242"
    assert block.seq.tolist() == [0, 1, 2]
    assert (block.rel1 > block.rel2).all() and set(block.query_id.tolist()) == {4242}
    assert np.array_equal(block.phi, scope["phi"]) and block.image_id.tolist() == [17, 23, 99]
    assert np.array_equal(block.p1_id, scope["image_id"][scope["p1"]])


def test_the_documented_click_producer_writes_a_message_rankstream_reads():
    blocks = re.findall(r'```python title="A clicks producer"\n(.*?)```', WIRE.read_text(), re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], str(WIRE), "exec"), scope)
    decoded = decode_clicks(scope["value"])
    impression = scope["impression_id"]
    assert decoded.rejects == [] and scope["key"] == impression.encode()
    assert decoded.records == [
        Click(impression, 17, 2, 1764031000.5, 30.0),
        Click(impression, 4, 5, 1764031042.0, None),
    ]

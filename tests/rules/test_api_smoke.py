from typing import Any


def test_q5_payload_round_trips_on_both_apis(qs: Any) -> None:
    q = qs.queue("smoke")
    payload = b"\x00abc\x00\xff"
    job_id = q.enqueue(payload)
    handle = q.claim_one("w1")
    assert handle is not None and handle.id == job_id and handle.payload == payload
    assert handle.ack() is True
    assert q.get_job(job_id) is None

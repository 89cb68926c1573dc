from __future__ import annotations

import msgspec

from arenad.chat import (
    EMPTY_ENCODED,
    CheckedChatMessages,
    decoded_messages,
    has_messages,
    join_messages,
)

A = {"role": "user", "content": "a"}
B = {"role": "assistant", "content": None}


def test_an_encoded_transcript_is_empty_only_as_the_empty_array() -> None:
    assert not has_messages(EMPTY_ENCODED) and not has_messages([])
    assert has_messages(msgspec.Raw(b'[{"role":"user","content":""}]')) and has_messages([A])


def test_encoded_transcripts_join_as_bytes_into_the_array_of_all_their_messages() -> None:
    one = msgspec.Raw(msgspec.json.encode([A, B]))
    two = msgspec.Raw(msgspec.json.encode([B]))
    joined = join_messages([one, EMPTY_ENCODED, two])
    assert type(joined) is msgspec.Raw
    assert bytes(joined) == msgspec.json.encode([A, B, B])
    assert join_messages([EMPTY_ENCODED, EMPTY_ENCODED]) == EMPTY_ENCODED
    assert join_messages([one]) is one


def test_a_mix_of_encoded_and_listed_transcripts_joins_as_a_list() -> None:
    encoded = msgspec.Raw(msgspec.json.encode([A]))
    vouched = join_messages([encoded, CheckedChatMessages([B])])
    assert type(vouched) is CheckedChatMessages and vouched == [A, B]
    # One transcript nobody vouches for: the joined one is walked by the validator.
    plain = join_messages([encoded, [B]])
    assert type(plain) is list and plain == [A, B]
    assert (
        decoded_messages(encoded) == [A] and type(decoded_messages(encoded)) is CheckedChatMessages
    )

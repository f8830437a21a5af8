"""Frames 1-4 of shared/reference/wire-examples.md (hex dumps kept as literals) decoded field by field."""


def parse_hexdump(dump: str) -> bytes:
    """Columns: 4-digit offset, two spaces, up to 16 hex bytes, ASCII column."""
    data = b""
    for line in dump.strip().splitlines():
        data += bytes.fromhex(line[6:54])
    return data


FRAME1_HEARTBEAT_REQUEST = parse_hexdump(
    r"""
0000  00 00 02 cc 00 00 00 6f 7b 22 63 6f 64 65 22 3a  |.......o{"code":|
0010  33 34 2c 22 65 78 74 46 69 65 6c 64 73 22 3a 7b  |34,"extFields":{|
0020  7d 2c 22 66 6c 61 67 22 3a 30 2c 22 6c 61 6e 67  |},"flag":0,"lang|
0030  75 61 67 65 22 3a 22 4a 41 56 41 22 2c 22 6f 70  |uage":"JAVA","op|
0040  61 71 75 65 22 3a 31 2c 22 73 65 72 69 61 6c 69  |aque":1,"seriali|
0050  7a 65 54 79 70 65 43 75 72 72 65 6e 74 52 50 43  |zeTypeCurrentRPC|
0060  22 3a 22 4a 53 4f 4e 22 2c 22 76 65 72 73 69 6f  |":"JSON","versio|
0070  6e 22 3a 34 37 39 7d 7b 22 63 6c 69 65 6e 74 49  |n":479}{"clientI|
0080  44 22 3a 22 31 39 32 2e 31 36 38 2e 30 2e 31 30  |D":"192.168.0.10|
0090  40 31 32 33 34 35 22 2c 22 63 6f 6e 73 75 6d 65  |@12345","consume|
00a0  72 44 61 74 61 53 65 74 22 3a 5b 7b 22 63 6f 6e  |rDataSet":[{"con|
00b0  73 75 6d 65 46 72 6f 6d 57 68 65 72 65 22 3a 22  |sumeFromWhere":"|
00c0  43 4f 4e 53 55 4d 45 5f 46 52 4f 4d 5f 4c 41 53  |CONSUME_FROM_LAS|
00d0  54 5f 4f 46 46 53 45 54 22 2c 22 63 6f 6e 73 75  |T_OFFSET","consu|
00e0  6d 65 54 79 70 65 22 3a 22 43 4f 4e 53 55 4d 45  |meType":"CONSUME|
00f0  5f 50 41 53 53 49 56 45 4c 59 22 2c 22 67 72 6f  |_PASSIVELY","gro|
0100  75 70 4e 61 6d 65 22 3a 22 63 67 31 22 2c 22 6d  |upName":"cg1","m|
0110  65 73 73 61 67 65 4d 6f 64 65 6c 22 3a 22 43 4c  |essageModel":"CL|
0120  55 53 54 45 52 49 4e 47 22 2c 22 73 75 62 73 63  |USTERING","subsc|
0130  72 69 70 74 69 6f 6e 44 61 74 61 53 65 74 22 3a  |riptionDataSet":|
0140  5b 7b 22 63 6c 61 73 73 46 69 6c 74 65 72 4d 6f  |[{"classFilterMo|
0150  64 65 22 3a 66 61 6c 73 65 2c 22 63 6f 64 65 53  |de":false,"codeS|
0160  65 74 22 3a 5b 5d 2c 22 65 78 70 72 65 73 73 69  |et":[],"expressi|
0170  6f 6e 54 79 70 65 22 3a 22 54 41 47 22 2c 22 73  |onType":"TAG","s|
0180  75 62 53 74 72 69 6e 67 22 3a 22 2a 22 2c 22 73  |ubString":"*","s|
0190  75 62 56 65 72 73 69 6f 6e 22 3a 31 37 30 30 30  |ubVersion":17000|
01a0  30 30 30 30 30 30 30 30 2c 22 74 61 67 73 53 65  |00000000,"tagsSe|
01b0  74 22 3a 5b 5d 2c 22 74 6f 70 69 63 22 3a 22 54  |t":[],"topic":"T|
01c0  6f 70 69 63 54 65 73 74 22 7d 2c 7b 22 63 6c 61  |opicTest"},{"cla|
01d0  73 73 46 69 6c 74 65 72 4d 6f 64 65 22 3a 66 61  |ssFilterMode":fa|
01e0  6c 73 65 2c 22 63 6f 64 65 53 65 74 22 3a 5b 5d  |lse,"codeSet":[]|
01f0  2c 22 65 78 70 72 65 73 73 69 6f 6e 54 79 70 65  |,"expressionType|
0200  22 3a 22 54 41 47 22 2c 22 73 75 62 53 74 72 69  |":"TAG","subStri|
0210  6e 67 22 3a 22 2a 22 2c 22 73 75 62 56 65 72 73  |ng":"*","subVers|
0220  69 6f 6e 22 3a 31 37 30 30 30 30 30 30 30 30 30  |ion":17000000000|
0230  30 31 2c 22 74 61 67 73 53 65 74 22 3a 5b 5d 2c  |01,"tagsSet":[],|
0240  22 74 6f 70 69 63 22 3a 22 25 52 45 54 52 59 25  |"topic":"%RETRY%|
0250  63 67 31 22 7d 5d 2c 22 75 6e 69 74 4d 6f 64 65  |cg1"}],"unitMode|
0260  22 3a 66 61 6c 73 65 7d 5d 2c 22 68 65 61 72 74  |":false}],"heart|
0270  62 65 61 74 46 69 6e 67 65 72 70 72 69 6e 74 22  |beatFingerprint"|
0280  3a 30 2c 22 70 72 6f 64 75 63 65 72 44 61 74 61  |:0,"producerData|
0290  53 65 74 22 3a 5b 7b 22 67 72 6f 75 70 4e 61 6d  |Set":[{"groupNam|
02a0  65 22 3a 22 43 4c 49 45 4e 54 5f 49 4e 4e 45 52  |e":"CLIENT_INNER|
02b0  5f 50 52 4f 44 55 43 45 52 22 7d 5d 2c 22 77 69  |_PRODUCER"}],"wi|
02c0  74 68 6f 75 74 53 75 62 22 3a 66 61 6c 73 65 7d  |thoutSub":false}|
"""
)

FRAME2_SEND_V2_BINARY = parse_hexdump(
    r"""
0000  00 00 00 ed 01 00 00 e4 01 36 00 01 df 00 00 00  |.........6......|
0010  02 00 00 00 00 00 00 00 00 00 00 00 cf 00 01 61  |...............a|
0020  00 00 00 03 70 67 31 00 01 62 00 00 00 09 54 6f  |....pg1..b....To|
0030  70 69 63 54 65 73 74 00 01 63 00 00 00 06 54 42  |picTest..c....TB|
0040  57 31 30 32 00 01 64 00 00 00 01 34 00 01 65 00  |W102..d....4..e.|
0050  00 00 01 30 00 01 66 00 00 00 01 30 00 01 67 00  |...0..f....0..g.|
0060  00 00 0d 31 37 30 30 30 30 30 30 30 30 30 30 30  |...1700000000000|
0070  00 01 68 00 00 00 01 30 00 01 69 00 00 00 3e 54  |..h....0..i...>T|
0080  41 47 53 01 54 61 67 41 02 57 41 49 54 01 74 72  |AGS.TagA.WAIT.tr|
0090  75 65 02 55 4e 49 51 5f 4b 45 59 01 43 30 41 38  |ue.UNIQ_KEY.C0A8|
00a0  30 30 30 41 33 30 33 39 31 38 42 34 41 41 43 32  |000A303918B4AAC2|
00b0  30 42 45 42 43 32 30 30 30 30 30 30 02 00 01 6a  |0BEBC2000000...j|
00c0  00 00 00 01 30 00 01 6b 00 00 00 05 66 61 6c 73  |....0..k....fals|
00d0  65 00 01 6d 00 00 00 05 66 61 6c 73 65 00 01 6e  |e..m....false..n|
00e0  00 00 00 08 62 72 6f 6b 65 72 2d 61 48 65 6c 6c  |....broker-aHell|
00f0  6f                                               |o|
"""
)

FRAME3_SEND_RESPONSE = parse_hexdump(
    r"""
0000  00 00 01 1e 00 00 01 1a 7b 22 63 6f 64 65 22 3a  |........{"code":|
0010  30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a 7b 22  |0,"extFields":{"|
0020  71 75 65 75 65 49 64 22 3a 22 30 22 2c 22 54 52  |queueId":"0","TR|
0030  41 43 45 5f 4f 4e 22 3a 22 74 72 75 65 22 2c 22  |ACE_ON":"true","|
0040  4d 53 47 5f 52 45 47 49 4f 4e 22 3a 22 44 65 66  |MSG_REGION":"Def|
0050  61 75 6c 74 52 65 67 69 6f 6e 22 2c 22 71 75 65  |aultRegion","que|
0060  75 65 4f 66 66 73 65 74 22 3a 22 30 22 2c 22 6d  |ueOffset":"0","m|
0070  73 67 49 64 22 3a 22 43 30 41 38 30 30 31 34 30  |sgId":"C0A800140|
0080  30 30 30 32 41 39 46 30 30 30 30 30 30 30 30 30  |0002A9F000000000|
0090  30 30 30 30 30 30 30 22 2c 22 74 72 61 6e 73 61  |0000000","transa|
00a0  63 74 69 6f 6e 49 64 22 3a 22 43 30 41 38 30 30  |ctionId":"C0A800|
00b0  30 41 33 30 33 39 31 38 42 34 41 41 43 32 30 42  |0A303918B4AAC20B|
00c0  45 42 43 32 30 30 30 30 30 30 22 7d 2c 22 66 6c  |EBC2000000"},"fl|
00d0  61 67 22 3a 31 2c 22 6c 61 6e 67 75 61 67 65 22  |ag":1,"language"|
00e0  3a 22 4a 41 56 41 22 2c 22 6f 70 61 71 75 65 22  |:"JAVA","opaque"|
00f0  3a 32 2c 22 73 65 72 69 61 6c 69 7a 65 54 79 70  |:2,"serializeTyp|
0100  65 43 75 72 72 65 6e 74 52 50 43 22 3a 22 4a 53  |eCurrentRPC":"JS|
0110  4f 4e 22 2c 22 76 65 72 73 69 6f 6e 22 3a 34 37  |ON","version":47|
0120  39 7d                                            |9}|
"""
)

FRAME4_PULL_RESPONSE = parse_hexdump(
    r"""
0000  00 00 01 de 00 00 00 f5 7b 22 63 6f 64 65 22 3a  |........{"code":|
0010  30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a 7b 22  |0,"extFields":{"|
0020  73 75 67 67 65 73 74 57 68 69 63 68 42 72 6f 6b  |suggestWhichBrok|
0030  65 72 49 64 22 3a 22 30 22 2c 22 6d 61 78 4f 66  |erId":"0","maxOf|
0040  66 73 65 74 22 3a 22 31 22 2c 22 67 72 6f 75 70  |fset":"1","group|
0050  53 79 73 46 6c 61 67 22 3a 22 30 22 2c 22 6e 65  |SysFlag":"0","ne|
0060  78 74 42 65 67 69 6e 4f 66 66 73 65 74 22 3a 22  |xtBeginOffset":"|
0070  31 22 2c 22 6d 69 6e 4f 66 66 73 65 74 22 3a 22  |1","minOffset":"|
0080  30 22 2c 22 74 6f 70 69 63 53 79 73 46 6c 61 67  |0","topicSysFlag|
0090  22 3a 22 30 22 7d 2c 22 66 6c 61 67 22 3a 31 2c  |":"0"},"flag":1,|
00a0  22 6c 61 6e 67 75 61 67 65 22 3a 22 4a 41 56 41  |"language":"JAVA|
00b0  22 2c 22 6f 70 61 71 75 65 22 3a 33 2c 22 72 65  |","opaque":3,"re|
00c0  6d 61 72 6b 22 3a 22 46 4f 55 4e 44 22 2c 22 73  |mark":"FOUND","s|
00d0  65 72 69 61 6c 69 7a 65 54 79 70 65 43 75 72 72  |erializeTypeCurr|
00e0  65 6e 74 52 50 43 22 3a 22 4a 53 4f 4e 22 2c 22  |entRPC":"JSON","|
00f0  76 65 72 73 69 6f 6e 22 3a 34 37 39 7d 00 00 00  |version":479}...|
0100  e5 da a3 20 a7 77 d1 89 82 00 00 00 00 00 00 00  |... .w..........|
0110  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  |................|
0120  00 00 00 00 00 00 00 01 8b cf e5 68 00 c0 a8 00  |...........h....|
0130  0a 00 00 d4 31 00 00 01 8b cf e5 68 7b c0 a8 00  |....1......h{...|
0140  14 00 00 2a 9f 00 00 00 00 00 00 00 00 00 00 00  |...*............|
0150  00 00 00 00 05 48 65 6c 6c 6f 09 54 6f 70 69 63  |.....Hello.Topic|
0160  54 65 73 74 00 7c 4d 53 47 5f 52 45 47 49 4f 4e  |Test.|MSG_REGION|
0170  01 44 65 66 61 75 6c 74 52 65 67 69 6f 6e 02 54  |.DefaultRegion.T|
0180  52 41 43 45 5f 4f 4e 01 74 72 75 65 02 55 4e 49  |RACE_ON.true.UNI|
0190  51 5f 4b 45 59 01 43 30 41 38 30 30 30 41 33 30  |Q_KEY.C0A8000A30|
01a0  33 39 31 38 42 34 41 41 43 32 30 42 45 42 43 32  |3918B4AAC20BEBC2|
01b0  30 30 30 30 30 30 02 43 4c 55 53 54 45 52 01 44  |000000.CLUSTER.D|
01c0  65 66 61 75 6c 74 43 6c 75 73 74 65 72 02 57 41  |efaultCluster.WA|
01d0  49 54 01 74 72 75 65 02 54 41 47 53 01 54 61 67  |IT.true.TAGS.Tag|
01e0  41 02                                            |A.|
"""
)


# ---------------------------------------------------------------------------------------------

import json  # noqa: E402

import pytest  # noqa: E402

from protocol.bodies import HeartbeatData  # noqa: E402
from protocol.codes import RequestCode, ResponseCode, SerializeType  # noqa: E402
from protocol.command import RemotingCommand, decode_command, encode_command  # noqa: E402
from protocol.frame import FrameDecoder  # noqa: E402
from protocol.headers import (  # noqa: E402
    PullMessageResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)

UNIQ_KEY = "C0A8000A303918B4AAC20BEBC2000000"
PROPS = "TAGS\x01TagA\x02WAIT\x01true\x02UNIQ_KEY\x01" + UNIQ_KEY + "\x02"
FRAME2_JSON_HEADER = (
    '{"code":310,"extFields":{"a":"pg1","b":"TopicTest","c":"TBW102","d":"4","e":"0","f":"0",'
    '"g":"1700000000000","h":"0","i":"TAGS\\u0001TagA\\u0002WAIT\\u0001true\\u0002UNIQ_KEY\\u0001'
    'C0A8000A303918B4AAC20BEBC2000000\\u0002","j":"0","k":"false","m":"false","n":"broker-a"},'
    '"flag":0,"language":"JAVA","opaque":2,"serializeTypeCurrentRPC":"JSON","version":479}'
)


def _single(frame: bytes) -> RemotingCommand:
    commands = FrameDecoder().feed(frame)
    assert len(commands) == 1
    direct = decode_command(frame[4:])
    assert direct == commands[0]
    return commands[0]


def test_dump_sizes_match_length_fields():
    for frame, total in (
        (FRAME1_HEARTBEAT_REQUEST, 720),
        (FRAME2_SEND_V2_BINARY, 241),
        (FRAME3_SEND_RESPONSE, 290),
        (FRAME4_PULL_RESPONSE, 482),
    ):
        assert len(frame) == total
        assert int.from_bytes(frame[:4], "big") == total - 4


def test_frame1_heartbeat_request():
    cmd = _single(FRAME1_HEARTBEAT_REQUEST)
    assert cmd.code == RequestCode.HEART_BEAT == 34
    assert cmd.ext_fields == {}
    assert cmd.flag == 0 and not cmd.is_response and not cmd.is_oneway
    assert cmd.language == "JAVA"
    assert cmd.opaque == 1
    assert cmd.remark is None
    assert cmd.version == 479
    assert cmd.serialize_type == SerializeType.JSON
    assert len(cmd.body) == 601
    hb = HeartbeatData.decode(cmd.body)
    assert hb.client_id == "192.168.0.10@12345"
    assert [p.group_name for p in hb.producers] == ["CLIENT_INNER_PRODUCER"]
    (consumer,) = hb.consumers
    assert consumer.group_name == "cg1"
    assert consumer.consume_type == "CONSUME_PASSIVELY"
    assert consumer.message_model == "CLUSTERING"
    assert consumer.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
    assert consumer.unit_mode is False
    topics = {s.topic: s for s in consumer.subscriptions}
    assert set(topics) == {"TopicTest", "%RETRY%cg1"}
    assert topics["TopicTest"].sub_version == 1700000000000
    assert topics["%RETRY%cg1"].sub_version == 1700000000001
    for sub in topics.values():
        assert sub.sub_string == "*" and sub.expression_type == "TAG"
        assert sub.tags_set == [] and sub.code_set == [] and sub.class_filter_mode is False
    # our encoder produces the identical header bytes for this command (same key order as fastjson)
    assert encode_command(cmd) == FRAME1_HEARTBEAT_REQUEST


def test_frame2_send_v2_binary_header():
    cmd = _single(FRAME2_SEND_V2_BINARY)
    assert cmd.serialize_type == SerializeType.ROCKETMQ
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 == 310
    assert cmd.language == "JAVA"
    assert cmd.version == 479
    assert cmd.opaque == 2
    assert cmd.flag == 0
    assert cmd.remark is None
    assert cmd.body == b"Hello"
    assert list(cmd.ext_fields) == list("abcdefghijkmn")
    assert cmd.ext_fields == {
        "a": "pg1",
        "b": "TopicTest",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": PROPS,
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }
    header = SendMessageRequestHeader.decode_v2(cmd.ext_fields)
    assert header.producer_group == "pg1"
    assert header.topic == "TopicTest"
    assert header.default_topic == "TBW102"
    assert header.default_topic_queue_nums == 4
    assert header.queue_id == 0
    assert header.sys_flag == 0
    assert header.born_timestamp == 1700000000000
    assert header.flag == 0
    assert header.properties == PROPS
    assert header.reconsume_times == 0
    assert header.unit_mode is False
    assert header.max_reconsume_times is None
    assert header.batch is False
    assert header.broker_name == "broker-a"
    # re-encoding with the same ext order reproduces the frame byte for byte
    assert encode_command(cmd) == FRAME2_SEND_V2_BINARY


def test_frame2_json_variant_matches_binary():
    binary = _single(FRAME2_SEND_V2_BINARY)
    header = FRAME2_JSON_HEADER.encode()
    frame = (4 + len(header) + 5).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + b"Hello"
    cmd = _single(frame)
    assert cmd.serialize_type == SerializeType.JSON
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version, cmd.remark, cmd.body) == (
        binary.code,
        binary.opaque,
        binary.flag,
        binary.language,
        binary.version,
        binary.remark,
        binary.body,
    )
    assert cmd.ext_fields == binary.ext_fields
    # encoding the JSON form reproduces fastjson's exact text, \u0001 escapes included
    assert encode_command(cmd) == frame


def test_frame3_send_response():
    cmd = _single(FRAME3_SEND_RESPONSE)
    assert cmd.code == ResponseCode.SUCCESS
    assert cmd.flag == 1 and cmd.is_response
    assert cmd.language == "JAVA"
    assert cmd.opaque == 2
    assert cmd.version == 479
    assert cmd.remark is None
    assert cmd.body == b""
    assert cmd.serialize_type == SerializeType.JSON
    assert cmd.ext_fields == {
        "queueId": "0",
        "TRACE_ON": "true",
        "MSG_REGION": "DefaultRegion",
        "queueOffset": "0",
        "msgId": "C0A8001400002A9F0000000000000000",
        "transactionId": UNIQ_KEY,
    }
    header = SendMessageResponseHeader.decode(cmd.ext_fields)
    assert header.msg_id == "C0A8001400002A9F0000000000000000"
    assert header.queue_id == 0 and header.queue_offset == 0
    assert header.transaction_id == UNIQ_KEY
    assert header.msg_region == "DefaultRegion" and header.trace_on == "true"
    assert encode_command(cmd) == FRAME3_SEND_RESPONSE


def test_frame3_is_what_make_response_builds():
    request = _single(FRAME2_SEND_V2_BINARY)
    request.serialize_type = SerializeType.JSON  # the reference response is JSON
    header = SendMessageResponseHeader(
        msg_id="C0A8001400002A9F0000000000000000",
        queue_id=0,
        queue_offset=0,
        transaction_id=UNIQ_KEY,
        msg_region="DefaultRegion",
        trace_on="true",
    )
    response = request.make_response(ResponseCode.SUCCESS, ext_fields=header.encode())
    expected = _single(FRAME3_SEND_RESPONSE)
    parsed = decode_command(encode_command(response)[4:])
    assert parsed == expected


def test_frame4_pull_response():
    cmd = _single(FRAME4_PULL_RESPONSE)
    assert cmd.code == 0 and cmd.flag == 1 and cmd.opaque == 3
    assert cmd.language == "JAVA" and cmd.version == 479
    assert cmd.remark == "FOUND"
    assert cmd.ext_fields == {
        "suggestWhichBrokerId": "0",
        "maxOffset": "1",
        "groupSysFlag": "0",
        "nextBeginOffset": "1",
        "minOffset": "0",
        "topicSysFlag": "0",
    }
    header = PullMessageResponseHeader.decode(cmd.ext_fields)
    assert header.suggest_which_broker_id == 0
    assert header.next_begin_offset == 1
    assert header.min_offset == 0
    assert header.max_offset == 1
    assert header.topic_sys_flag == 0 and header.group_sys_flag == 0
    assert len(cmd.body) == 229
    assert cmd.body[:8] == bytes.fromhex("000000e5daa320a7")
    assert cmd.body.endswith(b"TAGS\x01TagA\x02")
    assert encode_command(cmd) == FRAME4_PULL_RESPONSE


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1000])
def test_all_four_frames_concatenated_in_chunks(chunk):
    stream = FRAME1_HEARTBEAT_REQUEST + FRAME2_SEND_V2_BINARY + FRAME3_SEND_RESPONSE + FRAME4_PULL_RESPONSE
    whole = FrameDecoder().feed(stream)
    assert [c.opaque for c in whole] == [1, 2, 2, 3]
    decoder = FrameDecoder()
    got = []
    for i in range(0, len(stream), chunk):
        got.extend(decoder.feed(stream[i : i + chunk]))
    assert got == whole
    assert decoder.buffered == 0


def test_json_header_of_frame1_is_compact_and_sorted():
    header = FRAME1_HEARTBEAT_REQUEST[8 : 8 + 111]
    assert json.loads(header) == {
        "code": 34,
        "extFields": {},
        "flag": 0,
        "language": "JAVA",
        "opaque": 1,
        "serializeTypeCurrentRPC": "JSON",
        "version": 479,
    }

"""``mqadmin``: RocketMQ-style admin sub-commands for this broker (and name server).

Usage: ``mqadmin <subCommand> [options]`` — e.g. ``mqadmin updateTopic -n 127.0.0.1:9876 -t Orders -w 8``.
Every sub-command takes ``-n host:port`` (default: $NAMESRV_ADDR or 127.0.0.1:9876), ``--json`` (machine
output) and ``--timeout`` seconds, and has its own ``--help``.

ACL: ``--access-key`` / ``--secret-key`` (default: $ROCKETMQ_ACCESS_KEY / $ROCKETMQ_SECRET_KEY) sign every request for
a broker with ``aclEnable=true``; with either missing, nothing is signed.

Exit codes: 0 ok, 1 request refused / failed, 2 usage error, 3 name server or broker unreachable,
4 not found (unknown topic, group, message), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from datetime import datetime
from typing import Callable

from client.admin import AdminClient, AdminError
from client.admin import (commands, consumer_commands, controller_commands, epoch_commands, trace_commands,
                          transaction_commands)
from client.credentials import ACCESS_KEY_ENV, SECRET_KEY_ENV, SECURITY_TOKEN_ENV, Credentials
from client.remoting import tls_context

DEFAULT_NAMESRV = "127.0.0.1:9876"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or a local date-time: ``2024-05-01 12:00:00``, ISO ``2024-05-01T12:00``,
    or RocketMQ's ``2024-05-01#12:00:00:000``."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    java = value.replace("#", " ")
    if java.count(":") == 3:  # HH:mm:ss:SSS
        head, _, millis = java.rpartition(":")
        java = f"{head}.{millis}"
    try:
        return int(datetime.fromisoformat(java).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use epoch milliseconds or 'YYYY-MM-DD HH:MM:SS'") from None


def _bool_arg(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _reset_time(text: str) -> int:
    if text.strip() == "-1":
        return -1
    if text.strip().lower() == "now":
        return int(time.time() * 1000)
    return parse_time_ms(text)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namesrvAddr", dest="namesrv",
                        default=os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV,
                        help="name server address host:port[;host:port] (default: $NAMESRV_ADDR or %(default)s)")
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each answer (default 5)")
    acl = common.add_argument_group("ACL (brokers with aclEnable=true)")
    acl.add_argument("--access-key", "--accessKey", dest="access_key",
                     help=f"account to sign requests with (default: ${ACCESS_KEY_ENV})")
    acl.add_argument("--secret-key", "--secretKey", dest="secret_key",
                     help=f"its secret key (default: ${SECRET_KEY_ENV}; prefer the variable: "
                          "arguments are visible to other users)")
    common.add_argument("--tls", action="store_true", help="talk TLS to name servers and brokers")
    common.add_argument("--tls-ca", dest="tls_ca", metavar="PATH",
                        help="PEM CA bundle verifying their certificates (default: the system store)")
    common.add_argument("--tls-cert", dest="tls_cert", metavar="PATH", help="client certificate (mutual TLS)")
    common.add_argument("--tls-key", dest="tls_key", metavar="PATH", help="client certificate's private key")
    return common


def _target_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-b", "--brokerAddr", dest="broker_addr", help="one broker, host:port")
    where.add_argument("-c", "--clusterName", dest="cluster", help="every master broker of this cluster")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mqadmin", description="Administer a RocketMQ-compatible broker cluster.",
        epilog="Exit codes: 0 ok, 1 refused/failed, 2 usage, 3 unreachable, 4 not found.")
    sub = parser.add_subparsers(dest="command", metavar="<subCommand>")
    sub.required = True
    common = _common_options()

    def add(name: str, handler: Callable, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = add("updateTopic", commands.update_topic, "Create or update a topic on brokers (default: every master)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", dest="read_queues", type=_positive, default=8)
    p.add_argument("-w", "--writeQueueNums", dest="write_queues", type=_positive, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 read+write (default 6)")
    p.add_argument("-o", "--order", type=_bool_arg, default=False, help="ordered topic (true/false)")
    p.add_argument("-a", "--attributes", help="attribute changes, e.g. +message.type=FIFO (NORMAL, FIFO, DELAY, "
                                              "TRANSACTION); -name removes one")
    _target_options(p)

    p = add("deleteTopic", commands.delete_topic, "Delete a topic from its brokers and the name server")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", dest="cluster", help="only on this cluster's brokers")

    add("topicList", commands.topic_list, "List every topic known to the name server")

    p = add("topicRoute", commands.topic_route, "Show the brokers and queues of a topic")
    p.add_argument("-t", "--topic", required=True)

    p = add("topicStatus", commands.topic_status, "Min/max offset and last update time of every queue of a topic")
    p.add_argument("-t", "--topic", required=True)

    p = add("updateSubGroup", commands.update_sub_group,
            "Create or update a consumer (subscription) group on brokers (default: every master)")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    p.add_argument("-r", "--retry-max", "--retryMaxTimes", dest="retry_max", type=int,
                   help="deliveries before a message goes to the DLQ")
    p.add_argument("-q", "--retryQueueNums", dest="retry_queues", type=int)
    p.add_argument("-s", "--consumeEnable", dest="consume_enable", type=_bool_arg)
    p.add_argument("-d", "--consumeBroadcastEnable", dest="broadcast_enable", type=_bool_arg)
    p.add_argument("-o", "--consumeMessageOrderly", dest="orderly", type=_bool_arg)
    _target_options(p)

    p = add("consumerProgress", commands.consumer_progress,
            "Per-queue broker offset, consumer offset and lag of a consumer group")
    p.add_argument("-g", "--groupName", dest="group", required=True)
    p.add_argument("-t", "--topic", help="only this topic")

    p = add("consumerConnection", commands.consumer_connection, "Clients and subscriptions of an online consumer group")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)

    p = add("producerConnection", commands.producer_connection,
            "Clients of an online producer group: address, language and version")
    p.add_argument("-g", "--producerGroup", dest="group", required=True)
    p.add_argument("-t", "--topic", help="ask only the brokers of this topic")

    p = add("consumerStatus", consumer_commands.consumer_status,
            "Running state of an online group's consumers: settings, subscriptions, queues and offsets")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    p.add_argument("-i", "--clientId", dest="client_id", help="one consumer (default: every online one)")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", help="ask through this broker")

    p = add("resetOffsetByTime", consumer_commands.reset_offset_by_time,
            "Move a group's offsets on a topic to the first message stored at or after a time; online consumers "
            "resume there")
    p.add_argument("-g", "--group", dest="group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", type=_reset_time, required=True,
                   help="epoch ms, a local date-time ('2024-05-01 12:00:00'), 'now', or -1 for the end")
    p.add_argument("-f", "--force", type=_bool_arg, default=True,
                   help="false: only move offsets back, never forward (default true)")

    p = add("transactionStatus", transaction_commands.transaction_status,
            "Open (undecided) transactional messages per topic and producer group, and decision counters")
    p.add_argument("-t", "--topic", help="only this topic")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", help="one broker (default: every master)")
    p.add_argument("-c", "--clusterName", dest="cluster", help="the masters of this cluster")

    # issue 28, controller mode (broker side): each replica's epoch list
    p = add("getBrokerEpoch", epoch_commands.get_broker_epoch,
            "Epoch entries (epoch, start and end offset) of every replica of a broker group, in controller mode")
    p.add_argument("-b", "--brokerName", dest="broker_name", help="the broker group")
    p.add_argument("-c", "--clusterName", dest="cluster", help="every group of this cluster")

    p = add("consumeMessage", consumer_commands.consume_message,
            "Have one online consumer's listener consume a stored message now (not through its queue)")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    p.add_argument("-i", "--clientId", dest="client_id", required=True)
    p.add_argument("-m", "--msgId", dest="msg_id", required=True, help="the message's offset message id")
    p.add_argument("-t", "--topic", help="the message's topic (informational)")
    p.add_argument("-b", "--brokerAddr", dest="broker_addr", help="broker storing it (default: from the msgId)")

    p = add("queryMsgById", commands.query_msg_by_id, "Show a message by offset message id or message id (UNIQ_KEY)")
    p.add_argument("-i", "--msgId", dest="msg_id", required=True)
    p.add_argument("-t", "--topic", help="topic to search for a UNIQ_KEY id (default: every topic)")

    p = add("queryMsgByKey", commands.query_msg_by_key, "Find messages of a topic by key (KEYS property)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", dest="key", required=True)
    p.add_argument("-b", "--beginTimestamp", dest="begin", type=parse_time_ms, default=0)
    p.add_argument("-e", "--endTimestamp", dest="end", type=parse_time_ms)
    p.add_argument("-m", "--maxNum", dest="max_num", type=_positive, default=64)

    p = add("queryMsgByOffset", commands.query_msg_by_offset, "Show the message at a queue offset")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName", dest="broker_name", required=True)
    p.add_argument("-i", "--queueId", dest="queue_id", type=int, required=True)
    p.add_argument("-o", "--offset", type=int, required=True)

    p = add("printMsg", commands.print_msg, "Print the messages of a topic (optionally between two times)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--beginTimestamp", dest="begin", type=parse_time_ms)
    p.add_argument("-e", "--endTimestamp", dest="end", type=parse_time_ms)
    p.add_argument("-m", "--max", dest="max_messages", type=_positive, default=1000,
                   help="stop after this many messages (default 1000)")

    add("clusterList", commands.cluster_list, "List clusters and brokers with their traffic")

    p = add("brokerStatus", commands.broker_status, "Runtime information of brokers (default: every master)")
    _target_options(p)

    p = add("dlqList", commands.dlq_list, "List the dead-letter messages of a consumer group")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    p.add_argument("-m", "--max", dest="max_messages", type=_positive, default=1000)

    p = add("resendDlq", commands.resend_dlq,
            "Re-send dead-letter messages of a group (to the group's own retry topic by default, so only that "
            "group consumes them again) and report where each went")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-i", "--msgId", dest="msg_id", help="one dead message (message id or offset id)")
    which.add_argument("--all", action="store_true", help="every message in the group's DLQ")
    target = p.add_mutually_exclusive_group()
    target.add_argument("-t", "--to-topic", "--topic", dest="topic",
                        help="send to this topic instead of %%RETRY%%<group>")
    target.add_argument("--to-original-topic", dest="to_original", action="store_true",
                        help="send to the topic each message was first sent to (every group of it gets it again)")
    p.add_argument("-m", "--max", dest="max_messages", type=_positive, default=10_000)
    p.add_argument("--force", action="store_true",
                   help="also resend letters that were resent before (each resend delivers the message again)")

    trace_commands.add_parsers(add, parse_time_ms, _positive)  # issue 31: queryMsgTraceById / queryTraceByMsgId
    controller_commands.add_parsers(add)  # issue 28: getControllerMetaData, getSyncStateSet, electMaster, ...
    return parser


def credentials_from(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Credentials | None:
    """Options first, then the environment; None (no signing) when no access key or no secret key is given."""
    env = os.environ if environ is None else environ
    access_key = (getattr(args, "access_key", None) or env.get(ACCESS_KEY_ENV) or "").strip()
    secret_key = (getattr(args, "secret_key", None) or env.get(SECRET_KEY_ENV) or "").strip()
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        missing = "--access-key" if not access_key else "--secret-key"
        variable = ACCESS_KEY_ENV if not access_key else SECRET_KEY_ENV
        raise ValueError(f"ACL credentials are incomplete: give {missing} (or set {variable})")
    return Credentials(access_key, secret_key, (env.get(SECURITY_TOKEN_ENV) or "").strip() or None)


async def run(args: argparse.Namespace) -> int:
    credentials = args.credentials if "credentials" in args else credentials_from(args)
    tls = None
    if args.tls or args.tls_ca or args.tls_cert:
        try:
            tls = tls_context(True, args.tls_ca, args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise AdminError(f"--tls-ca/--tls-cert/--tls-key: cannot load: {exc}") from None
    async with AdminClient(args.namesrv, timeout=args.timeout, credentials=credentials, ssl_context=tls) as admin:
        return int(await args.handler(admin, args) or 0)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.credentials = credentials_from(args)
    except ValueError as exc:
        parser.error(str(exc))  # exit code 2, like any usage error
    try:
        return asyncio.run(run(args))
    except AdminError as exc:
        report_error(args, str(exc), exc.exit_code, getattr(exc, "code", None), getattr(exc, "remark", None))
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `mqadmin printMsg ... | head`
        return 0
    except Exception as exc:  # a bug or an unexpected answer: one line, not a traceback
        report_error(args, f"unexpected error: {type(exc).__name__}: {exc}", 1)
        return 1


def report_error(args: argparse.Namespace, message: str, exit_code: int, code: int | None = None,
                 remark: str | None = None) -> None:
    """One line on stderr; with --json also a JSON object on stdout, so scripts parse failures like results."""
    print(f"mqadmin {args.command}: error: {message}", file=sys.stderr, flush=True)
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "code": code, "remark": remark, "exitCode": exit_code,
                          "command": args.command}, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    sys.exit(main())

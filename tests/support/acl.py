"""Plain-ACL accounts and request signing for the tests: the plain_acl.yml files the suites write beside a broker's
.conf, the credentials in them, and signed requests over raw remoting (WireClient) and gRPC metadata."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from pathlib import Path

from client import Credentials
from protocol.acl_signature import sign
from protocol.codes import ResponseCode

from tests.support.wire import WireClient

# ---- the raw-wire accounts: app_key01 may PUB|SUB Orders, only {reports} Reports, nothing else; billing is DENY
ACL_YAML = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: broker_admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: app_key01
    secretKey: app_secret01
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Orders=PUB|SUB
      - Reports={reports}
    groupPerms:
      - billing=DENY
  - accessKey: white_key1
    secretKey: white_secret1
    whiteRemoteAddress: 127.0.0.1
"""
APP = ("app_key01", "app_secret01")
ADMIN = ("broker_admin", "admin-secret-1")


def write_acl(path: Path, reports: str = "SUB") -> None:
    """Write ACL_YAML (Reports with the given permission) atomically, so a watching broker never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(ACL_YAML.replace("{reports}", reports))
    os.replace(tmp, path)


async def signed(client: WireClient, code: int, ext: dict, body: bytes = b"", creds=APP):
    """A remoting request signed with creds (access key, secret key), as the Java ACL client signs it."""
    fields = dict(ext, AccessKey=creds[0])
    fields["Signature"] = sign(creds[1], fields, body)
    return await client.request(code, fields, body)


def assert_refused(resp, remark: str) -> None:
    """The broker's ACL refusal: SYSTEM_ERROR with an AclException remark saying why."""
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "AclException: " + remark), (resp.code, resp.remark)


def grpc_signed(access_key: str, secret_key: str, client_id: str = "acl@1@1@abc") -> tuple:
    """The metadata a 5.x SDK sends: x-mq-date-time signed with HMAC-SHA1 of the secret key."""
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    signature = hmac.new(secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
    return (("x-mq-client-id", client_id), ("x-mq-date-time", date),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
                              f"Signature={signature}"))


# ---- the client accounts (client.Credentials): orders_app may PUB|SUB Orders and SUB Payroll; billing is DENY
CLIENT_ACL_YAML = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: ops_admin_01
    secretKey: "0p5-s3cret"
    admin: true
  - accessKey: orders_app
    secretKey: orders-secret-1
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Orders=PUB|SUB
      - Payroll=SUB
    groupPerms:
      - billing=DENY
"""
CLIENT_ADMIN = Credentials("ops_admin_01", "0p5-s3cret")
CLIENT_APP = Credentials("orders_app", "orders-secret-1")
CLIENT_WRONG = Credentials("orders_app", "not-the-secret")

"""The web console's HTTP side (aiohttp): static pages shipped in the package and a JSON API under /api.

Owned by the broker: `start()` binds dashboardHost:dashboardPort and starts the counter history, `stop()` closes
both. Every change is a POST/DELETE with a JSON body (a page of another site cannot send one without the browser
asking first), allowed to admins only when ACL is on. Every request must name the console by one of its own
addresses in `Host` (broker/console/hosts.py: DNS rebinding); every read is filtered by the signed-in account's
permissions (broker/console/access.py); failed sign-ins slow down and then lock out (broker/console/throttle.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from broker.acl.authorizer import Authorizer
from broker.console.access import ConsoleError, Viewer
from broker.console.auth import SESSION_COOKIE, SESSION_TTL_S, ConsoleAuth
from broker.console.history import CounterHistory, Sample, now_ms
from broker.console.insight import broker_config, producer_list, trace_of, trace_topic_name
from broker.console.hosts import HostCheck
from broker.console.throttle import SignInThrottle, ThrottlePolicy
from broker.console.views import ConsoleViews
from broker.log_limit import RateLimitedLog

log = logging.getLogger(__name__)
_sign_in_failures = RateLimitedLog(log)  # per access key: a guessing client does not flood the log
_refusals = RateLimitedLog(log)  # foreign Host headers and locked-out sign-ins, per address

STATIC_DIR = Path(__file__).with_name("static")
MAX_REQUEST_BYTES = 64 * 1024
_SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _int_arg(request: web.Request, name: str, default: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ConsoleError(400, f"query parameter '{name}' is required")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConsoleError(400, f"query parameter '{name}' must be a whole number, got {raw!r}") from None


class ConsoleServer:
    """The console of one broker: `views` reads and changes it, `authorizer` (None: ACL off) signs in and decides
    what each account sees, `allowed_hosts` are the extra names it answers (dashboardAllowedHosts) besides its own
    (`host`, `port`, `broker_ip`), `sign_in` limits failed sign-ins per address and per account."""

    def __init__(self, views: ConsoleViews, authorizer: Authorizer | None, host: str, port: int, *,
                 broker_ip: str | None = None, allowed_hosts: list[str] | tuple[str, ...] = (),
                 sign_in: SignInThrottle | None = None, sample_interval_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.views = views
        self.auth = ConsoleAuth(authorizer)
        self.broker_ip = broker_ip
        self.allowed_hosts = tuple(allowed_hosts)
        self.hosts = HostCheck(host, port, broker_ip, self.allowed_hosts)  # rebuilt with the bound port at start
        self.sign_in = sign_in or SignInThrottle(ThrottlePolicy(), ThrottlePolicy(20, 100))
        self.history = CounterHistory(self._sample, sample_interval_s)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._sampler: asyncio.Task[None] | None = None
        self.bind_addr: str | None = None

    # ---- lifetime -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind (OSError when the port is taken) and start sampling."""
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_REQUEST_BYTES)
        self._routes(app)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True, backlog=128)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self._site = runner, site
        sockets = getattr(site._server, "sockets", None) or []  # the real port when 0 was asked for
        if sockets:
            host, port = sockets[0].getsockname()[:2]
            self.port = port
            self.bind_addr = f"{host}:{port}"
            self.hosts = HostCheck(self.host, port, self.broker_ip, self.allowed_hosts)
        self._sampler = asyncio.get_running_loop().create_task(self.history.run(), name="console-history")

    async def stop(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _sample(self) -> Sample:
        views = self.views
        stats = views.store.stats
        topics = {name: views.written_count(name) for name in views.topics.topic_names()}
        lags = {group: views.group_lag(group) for group in views.consuming_groups()}
        return Sample(now_ms(), int(stats.get("put_messages", 0)), int(stats.get("get_messages", 0)), topics, lags)

    # ---- plumbing -------------------------------------------------------------------------------
    def _routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/", self._index)
        r.add_static("/static/", STATIC_DIR, show_index=False, follow_symlinks=False)
        r.add_get("/api/session", self._session)
        r.add_post("/api/login", self._login)
        r.add_post("/api/logout", self._logout)
        r.add_get("/api/overview", self._overview)
        r.add_get("/api/rates", self._rates)
        r.add_get("/api/replication", self._replication)
        r.add_get("/api/topics", self._topics)
        r.add_post("/api/topics", self._save_topic)
        r.add_get("/api/topics/{topic}", self._topic)
        r.add_delete("/api/topics/{topic}", self._delete_topic)
        r.add_get("/api/groups", self._groups)
        r.add_get("/api/groups/{group}", self._group)
        r.add_post("/api/groups/{group}/reset", self._reset)
        r.add_get("/api/messages", self._search)
        r.add_get("/api/messages/{offset}", self._message)
        r.add_get("/api/dlq/{group}", self._dlq)
        r.add_post("/api/dlq/{group}/resend", self._resend)
        r.add_get("/api/producers", self._producers)
        r.add_get("/api/config", self._config)
        r.add_get("/api/traces/{msgId}", self._trace)

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Host, sign-in, admin-only changes, JSON errors and the security headers, for every request."""
        try:
            self._check_host(request)
            path = request.path
            if path.startswith("/api/") and path not in ("/api/session", "/api/login"):
                session = self.auth.session(request.cookies.get(SESSION_COOKIE), request.remote)
                if session is None:
                    raise ConsoleError(401, "sign in with an account of the broker's ACL file")
                if request.method not in ("GET", "HEAD"):
                    if request.content_type != "application/json":
                        raise ConsoleError(415, "changes are sent as application/json")
                    if not session.admin and path != "/api/logout":
                        raise ConsoleError(403, f"account {session.access_key} is not an admin: it may look, "
                                                "not change")
                request["session"] = session
                # taken now, before any await: the session object is shared by the account's other requests
                request["viewer"] = Viewer(self.auth.authorizer, session.principal)
            response = await handler(request)
        except ConsoleError as exc:
            response = web.json_response({"error": exc.message}, status=exc.status, headers=exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = web.json_response({"error": exc.reason}, status=exc.status)
        except Exception as exc:  # a bug: logged with its traceback, the page gets one line
            log.exception("console: %s %s failed", request.method, request.path)
            response = web.json_response({"error": f"internal error: {type(exc).__name__}: {exc}"}, status=500)
        response.headers.update(_SECURITY_HEADERS)
        return response

    def _check_host(self, request: web.Request) -> None:
        """421 unless `Host` names this console (a re-pointed name of another site does not)."""
        host = request.headers.get("Host")
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        local_ip = sockname[0] if isinstance(sockname, (tuple, list)) and sockname else None
        if self.hosts.allows(host, local_ip):
            return
        _refusals.warning(("host", request.remote), "console: refused Host %r from %s (not one of this console's "
                          "names; see dashboardAllowedHosts)", (host or "")[:100], request.remote)
        shown = (host or "")[:100]
        raise ConsoleError(421, f"this console does not answer to Host {shown!r}: open it by one of its own "
                                f"addresses ({self.hosts.describe()}, port {self.port}), or add the name to "
                                "dashboardAllowedHosts in broker.conf")

    def _viewer(self, request: web.Request) -> Viewer:
        """The account of a request the guard let through; a route it did not vet sees nothing when ACL is on."""
        viewer = request.get("viewer")
        if viewer is not None:
            return viewer
        if self.auth.enabled:
            raise ConsoleError(401, "sign in with an account of the broker's ACL file")
        return Viewer.operator()

    @staticmethod
    async def _json_body(request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ConsoleError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ConsoleError(400, "the request body must be a JSON object")
        return body

    @staticmethod
    def _caller(request: web.Request) -> str:
        session = request.get("session")
        who = getattr(session, "access_key", "") or "console"
        return f"{who}@{request.remote or '?'}"

    # ---- pages and session ----------------------------------------------------------------------
    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    async def _session(self, request: web.Request) -> web.Response:
        session = self.auth.session(request.cookies.get(SESSION_COOKIE), request.remote)
        return web.json_response({"aclEnabled": self.auth.enabled, "signedIn": session is not None,
                                  "accessKey": session.access_key if session else None,
                                  "admin": bool(session and session.admin)})

    async def _login(self, request: web.Request) -> web.Response:
        if not self.auth.enabled:
            raise ConsoleError(400, "ACL is off on this broker: there is nothing to sign in to")
        if request.content_type != "application/json":
            raise ConsoleError(415, "sign-in is sent as application/json")
        body = await self._json_body(request)
        access_key = str(body.get("accessKey") or "")[:256]
        # from here to the answer nothing awaits: the check, the secret and the count see one state
        refusal = self.sign_in.check(request.remote, access_key)
        if refusal is not None:  # the secret is not looked at: a locked-out guesser learns nothing
            _refusals.warning(("sign-in-refused", request.remote), "console: sign-in for %r from %s refused: %s",
                              access_key[:64], request.remote, refusal.message)
            raise ConsoleError(429, refusal.message, {"Retry-After": str(refusal.retry_after_s)})
        granted = self.auth.login(access_key, str(body.get("secretKey") or ""), request.remote or "")
        if granted is None:
            self.sign_in.failed(request.remote, access_key)
            _sign_in_failures.warning(("sign-in", access_key[:64]),
                                      "console: failed sign-in for %r from %s", access_key[:64], request.remote)
            raise ConsoleError(401, "unknown access key or wrong secret key")
        self.sign_in.succeeded(access_key)
        token, session = granted
        response = web.json_response({"signedIn": True, "accessKey": session.access_key, "admin": session.admin})
        response.set_cookie(SESSION_COOKIE, token, max_age=SESSION_TTL_S, httponly=True, samesite="Strict",
                            secure=request.secure)
        return response

    async def _logout(self, request: web.Request) -> web.Response:
        self.auth.logout(request.cookies.get(SESSION_COOKIE))
        response = web.json_response({"signedIn": False})
        response.del_cookie(SESSION_COOKIE)
        return response

    # ---- overview -------------------------------------------------------------------------------
    async def _overview(self, request: web.Request) -> web.Response:
        return web.json_response(self.views.overview(self._viewer(request)))

    async def _rates(self, request: web.Request) -> web.Response:
        self._viewer(request).require_admin("the broker-wide message rates (GET_BROKER_RUNTIME_INFO's figures)")
        return web.json_response({"intervalSeconds": self.history.interval_s, "points": self.history.broker_rates()})

    async def _replication(self, request: web.Request) -> web.Response:
        viewer = self._viewer(request)
        if self.views.replication is None:
            raise ConsoleError(404, "this broker does not report its replication")
        return web.json_response(await self.views.replication.state(viewer))

    # ---- topics ---------------------------------------------------------------------------------
    async def _topics(self, request: web.Request) -> web.Response:
        return web.json_response({"topics": self.views.topic_list(self.history.topic_rates(), self._viewer(request))})

    async def _topic(self, request: web.Request) -> web.Response:
        return web.json_response(self.views.topic_detail(request.match_info["topic"], self._viewer(request)))

    async def _save_topic(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        await self.views.save_topic(body, self._caller(request), self._viewer(request))
        return web.json_response({"ok": True, "topic": body.get("topic")})

    async def _delete_topic(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        await self.views.delete_topic(topic, self._caller(request), self._viewer(request))
        return web.json_response({"ok": True, "topic": topic})

    # ---- groups ---------------------------------------------------------------------------------
    async def _groups(self, request: web.Request) -> web.Response:
        return web.json_response({"groups": self.views.group_list(self._viewer(request))})

    async def _group(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        detail = await self.views.group_detail(group, self._viewer(request))
        detail["lagHistory"] = self.history.lag_series(group)
        return web.json_response(detail)

    async def _reset(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        topic = str(body.get("topic") or "")
        try:
            timestamp = int(body.get("timestamp"))
        except (TypeError, ValueError):
            raise ConsoleError(400, "timestamp must be milliseconds since the epoch (or -1 for the end)") from None
        result = await self.views.reset_offset(request.match_info["group"], topic, timestamp, self._caller(request),
                                                self._viewer(request))
        return web.json_response(result)

    # ---- messages -------------------------------------------------------------------------------
    async def _search(self, request: web.Request) -> web.Response:
        q = request.query
        viewer = self._viewer(request)
        topic = q.get("topic", "").strip()
        if q.get("id"):
            return web.json_response({"messages": self.views.by_id(q["id"], topic or None, viewer), "truncated": False})
        if q.get("key"):
            return web.json_response({"messages": self.views.by_key(topic, q["key"], viewer), "truncated": False})
        if topic:
            now = int(time.time() * 1000)
            begin = _int_arg(request, "begin", now - 3600_000)
            end = _int_arg(request, "end", now)
            return web.json_response(self.views.by_time(topic, begin, end, viewer))
        raise ConsoleError(400, "search by id (id=...), by key (topic=...&key=...) or by time "
                                "(topic=...&begin=...&end=...)")

    async def _message(self, request: web.Request) -> web.Response:
        try:
            offset = int(request.match_info["offset"])
        except ValueError:
            raise ConsoleError(400, "a message is named by its commit-log offset (a whole number)") from None
        return web.json_response(self.views.message_detail(offset, self._viewer(request)))

    # ---- dead letters ---------------------------------------------------------------------------
    async def _dlq(self, request: web.Request) -> web.Response:
        return web.json_response(self.views.dead_letters(request.match_info["group"], self._viewer(request)))

    async def _resend(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        body = await self._json_body(request)
        if body.get("all") is True:
            offsets = self.views.all_dead_letter_offsets(group, self._viewer(request))
        else:
            raw = body.get("offsets")
            if not isinstance(raw, list) or not raw or not all(isinstance(o, int) for o in raw):
                raise ConsoleError(400, "give 'offsets' (a list of commit-log offsets) or 'all': true")
            offsets = raw
        confirmed = body.get("confirm") is True
        earlier = self.views.already_resent(group, offsets)
        if earlier and not confirmed:  # resending twice delivers twice: the page asks first
            last = max(earlier, key=lambda e: e["at"])
            return web.json_response({
                "error": f"{len(earlier)} of these {len(offsets)} dead letter(s) were resent before (last at "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(last['at'] / 1000))} by {last['by']}); "
                         "confirm to resend them again",
                "needsConfirm": True, "alreadyResent": earlier}, status=409)
        results = await self.views.resend(group, offsets, self._caller(request), self._viewer(request),
                                          force=confirmed)
        return web.json_response({"group": group, "results": results,
                                  "resent": sum(1 for r in results if r["ok"])})

    # ---- producers, configuration, traces -------------------------------------------------------
    async def _producers(self, request: web.Request) -> web.Response:
        return web.json_response(await producer_list(self.views, self._viewer(request)))

    async def _config(self, request: web.Request) -> web.Response:
        return web.json_response(await broker_config(self.views, self._viewer(request)))

    async def _trace(self, request: web.Request) -> web.Response:
        topic = request.query.get("traceTopic", "").strip() or await trace_topic_name(self.views)
        return web.json_response(trace_of(self.views, request.match_info["msgId"], topic, self._viewer(request)))


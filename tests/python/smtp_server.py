"""A real SMTP server for the tests (aiosmtpd), with AUTH, STARTTLS and implicit TLS.

Each received message is written to --maildir as one RFC 5322 file `NNNNNN.eml` (headers and
body exactly as received), next to `NNNNNN.json` with the envelope and session facts
(mail_from, rcpt_tos, authenticated login, whether TLS was in use). Both are written under a
temporary name and renamed, so a reader never sees a partial file; the `.json` file is
renamed last, so its presence means the message is complete.

Options:
  --host/--port                  where to listen (127.0.0.1 by default)
  --maildir DIR                  where received messages go (created if missing)
  --auth-user/--auth-password    require AUTH with these credentials before MAIL FROM
  --auth-mechanisms PLAIN,LOGIN  mechanisms offered (default both; e.g. LOGIN only)
  --no-auth                      do not offer AUTH at all: the AUTH command answers 502
  --tls-cert/--tls-key           PEM files; enable STARTTLS (or implicit TLS, see below)
  --require-starttls             refuse commands other than EHLO/STARTTLS/QUIT before TLS
  --implicit-tls                 TLS from the first byte (SMTPS) instead of STARTTLS

When AUTH is required and STARTTLS is offered, AUTH is only accepted after STARTTLS, as real
submission servers do. Without any TLS, AUTH is accepted over plain text (tests only).
"""

import argparse
import asyncio
import json
import os
import signal
import ssl
import sys
import threading

import parent_watch
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

BUILTIN_MECHANISMS = ("LOGIN", "PLAIN")


class Authenticator:
    def __init__(self, user: str, password: str) -> None:
        self.user = user.encode()
        self.password = password.encode()

    def __call__(self, server, session, envelope, mechanism, auth_data):
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        ok = auth_data.login == self.user and auth_data.password == self.password
        return AuthResult(success=ok, handled=False, auth_data=auth_data)


class MaildirHandler:
    def __init__(self, maildir: str, offer_auth: bool) -> None:
        self.maildir = maildir
        self.offer_auth = offer_auth
        self.lock = threading.Lock()
        self.counter = 0

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        if not self.offer_auth:
            responses = [r for r in responses if not r[4:].upper().startswith("AUTH")]
        return responses

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.counter += 1
            seq = self.counter
        base = os.path.join(self.maildir, f"{seq:06d}")
        login = None
        auth_data = session.auth_data
        if session.authenticated and isinstance(auth_data, LoginPassword):
            login = auth_data.login.decode(errors="replace")
        meta = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "authenticated": bool(session.authenticated),
            "login": login,
            # session.ssl is set after STARTTLS only; implicit TLS shows on the transport.
            "tls": session.ssl is not None
            or (server.transport is not None
                and server.transport.get_extra_info("ssl_object") is not None),
            "peer": list(session.peer) if session.peer else None,
        }
        write_atomically(base + ".eml", envelope.original_content or b"")
        write_atomically(base + ".json", json.dumps(meta).encode())
        return "250 2.0.0 Message accepted for delivery"


class NoAuthSMTP(SMTP):
    async def smtp_AUTH(self, arg: str) -> None:
        await self.push("502 5.5.1 AUTH not supported")


def write_atomically(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description="SMTP server for the booking operator's tests")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--maildir", required=True)
    p.add_argument("--auth-user")
    p.add_argument("--auth-password")
    p.add_argument("--auth-mechanisms", default="PLAIN,LOGIN")
    p.add_argument("--no-auth", action="store_true")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--require-starttls", action="store_true")
    p.add_argument("--implicit-tls", action="store_true")
    args = p.parse_args(argv)
    if (args.auth_user is None) != (args.auth_password is None):
        p.error("--auth-user and --auth-password go together")
    if args.no_auth and args.auth_user is not None:
        p.error("--no-auth excludes --auth-user")
    if (args.tls_cert is None) != (args.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    if (args.implicit_tls or args.require_starttls) and args.tls_cert is None:
        p.error("--implicit-tls and --require-starttls need --tls-cert and --tls-key")
    mechanisms = [m.strip().upper() for m in args.auth_mechanisms.split(",") if m.strip()]
    unknown = [m for m in mechanisms if m not in BUILTIN_MECHANISMS]
    if unknown or not mechanisms:
        p.error(f"--auth-mechanisms must name some of {', '.join(BUILTIN_MECHANISMS)}")
    args.mechanisms = mechanisms
    return args


async def serve(args) -> None:
    os.makedirs(args.maildir, exist_ok=True)
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)

    offer_auth = not args.no_auth
    handler = MaildirHandler(args.maildir, offer_auth)
    excluded = [m for m in BUILTIN_MECHANISMS if m not in args.mechanisms]
    auth_kwargs = {}
    if args.auth_user is not None:
        auth_kwargs = dict(
            auth_required=True,
            authenticator=Authenticator(args.auth_user, args.auth_password),
            # With STARTTLS offered, AUTH only after it; with implicit TLS the connection is
            # already encrypted (aiosmtpd cannot tell), and without TLS plain AUTH is allowed.
            auth_require_tls=tls is not None and not args.implicit_tls,
        )
    else:
        # No credentials configured: any AUTH attempt fails, mail is accepted without it.
        auth_kwargs = dict(auth_require_tls=False)

    smtp_class = SMTP if offer_auth else NoAuthSMTP

    def factory():
        return smtp_class(
            handler,
            hostname="smtp.test.local",
            tls_context=None if args.implicit_tls else tls,
            require_starttls=args.require_starttls and not args.implicit_tls,
            auth_exclude_mechanism=excluded,
            **auth_kwargs,
        )

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        factory, host=args.host, port=args.port, ssl=tls if args.implicit_tls else None
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    mode = "implicit-tls" if args.implicit_tls else ("starttls" if tls else "plain")
    print(f"smtp_server listening on {args.host}:{args.port} ({mode})", flush=True)
    async with server:
        await stop.wait()


def main(argv) -> int:
    args = parse_args(argv)
    parent_watch.start()
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

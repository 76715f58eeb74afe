"""A real SMTP server on 127.0.0.1 (aiosmtpd): every message is a ``mailbox.send`` effect.

An agent that sends mail with plain ``smtplib`` is drilled unmodified: ``--smtp-fake`` starts this
server and exports ``KILLDRILL_SMTP=host:port``; the agent reads it as it reads any SMTP host.
``login()`` accepts any credentials (PLAIN, LOGIN), with or without TLS.  ``starttls()`` works as
against a mail provider's submission port (587): the server offers STARTTLS with a certificate made
for it when it starts (for ``localhost`` and ``127.0.0.1``, with the ``cryptography`` package),
issued by a CA made with it that can vouch for the loopback alone (:class:`Tls`).  ``smtplib``'s
default context, which checks no certificate, upgrades the connection; a context that verifies
(``ssl.create_default_context()``) does too when it trusts that CA: the drill writes it with the
machine's own CAs into a file (``trust_file``) it gives every process as ``SSL_CERT_FILE``.
Implicit TLS (``smtplib.SMTP_SSL``, as at port 465) is served on a port of its own per launch
(:meth:`SmtpFake.attempt_tls_address`, ``KILLDRILL_SMTPS``) with the same certificate.

A message is recorded with payload ``{"to", "from", "subject", "body_sha256"}`` (recipients from
the envelope, sorted; the digest covers the decoded content of every part, so a regenerated MIME
boundary or ``Date`` header is not a different email) and as its key the first header whose name
contains ``Idempotency`` (``Idempotency-Key``, ``X-Idempotency-Key``), else its ``Message-ID``.
The ``Message-ID`` is also the message's reference: ``fakes.mailbox.lookup(message_id)`` finds it,
the reconciliation a gated sender needs after a kill.

The sender's runtime context (a workflow's body, an activity: ``killdrill.agent.in_runtime``)
arrives as an ``X-Killdrill-Context`` header the agent's bootstrap adds to a message sent to this
server (``killdrill.integrations._wire``): it is recorded with the call and removed from the
message before anything else reads it, so the payload is the one the agent sent.  It is as
trusted as the message itself: whoever can send mail here can say who sent it.

Order, as for every fake: the message and its record are committed, then ``during:mailbox.send``
is announced, then the server answers ``250``.  When the supervisor kills the sender at that
point the server closes the connection unanswered: the mail went out, the sender never heard.
Email dedupes nothing: a second message is a second email, whatever its key.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import functools
import hashlib
import os
import re
import socket
import ssl
import tempfile
import threading
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

from killdrill.agent import CONTEXT_HEADER, ControlChannelError, wire_context_of
from killdrill.fakes.httpguard import MAX_BODY, REQUEST_DEADLINE_S
from killdrill.fakes.peer import peer_pid
from killdrill.fakes.serving import Binding
from killdrill.fakes.wire import record_effect  # one binding type for the HTTP and SMTP fakes
from killdrill.ledger import Ledger

__all__ = ["SmtpFake", "Tls", "message_record", "system_trust", "tls"]

_KEY_HEADER = re.compile(r"idempotency", re.IGNORECASE)
_CONTEXT_LINE = re.compile(
    rb"^" + re.escape(CONTEXT_HEADER.encode()) + rb":[ \t]*((?:[^\r\n]*)(?:\r?\n[ \t][^\r\n]*)*)\r?\n",
    re.IGNORECASE | re.MULTILINE,
)


def split_context(raw: bytes) -> tuple[bytes, dict[str, Any] | None]:
    """The message without its ``X-Killdrill-Context`` header, and the context it carried (None:
    none, or one that is not a JSON object).  Only the header block is read; a folded value is
    unfolded (the agent folds a long one at 800 characters)."""
    head_end = re.search(rb"\r?\n\r?\n", raw)
    head = raw[: head_end.end()] if head_end else raw
    found = _CONTEXT_LINE.search(head)
    if found is None:
        return raw, None
    value = re.sub(rb"\r?\n[ \t]", b"", found.group(1)).strip()
    try:
        context = wire_context_of(value)
    except ValueError:
        context = None
    return raw[: found.start()] + raw[found.end() :], context


def message_record(
    raw: bytes, mail_from: str, rcpt_tos: list[str], thread: str | None = None
) -> tuple[dict[str, Any], str | None, str | None]:
    """``(payload, key, message_id)`` of one message as the ledger records it.

    The digest reads the drill's ``thread`` id as ``{thread}``, as the verdict reads payloads, so
    a body that names the thread (an order id derived from it) is the same email in every case."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    digest = hashlib.sha256()
    for part in msg.walk():
        if not part.is_multipart():
            content = part.get_payload(decode=True) or b""
            if not isinstance(content, bytes):  # decode=True gives bytes for every non-multipart part
                raise TypeError(f"undecodable {part.get_content_type()} part")
            if thread:
                content = content.replace(thread.encode(), b"{thread}")
            digest.update(content)
    message_id = str(msg["Message-ID"]).strip() if msg["Message-ID"] else None
    key = next((str(v).strip() for k, v in msg.items() if _KEY_HEADER.search(k)), None) or message_id
    payload = {
        "to": ", ".join(sorted(rcpt_tos)),
        "from": mail_from,
        "subject": str(msg["Subject"] or ""),
        "body_sha256": digest.hexdigest(),
    }
    return payload, key, message_id


class Tls:
    """The fake's TLS: a server context whose certificate (``localhost``, ``127.0.0.1``) is
    issued by a CA made for this server alone, and that CA's certificate to trust.

    The CA cannot vouch for anything but the loopback: its name constraints permit ``localhost``
    and ``127.0.0.1/32`` only (a verifier refuses a certificate it issued for another name), and
    its private key exists only while it signs the server's certificate, never on disk."""

    def __init__(self, context: ssl.SSLContext, ca_pem: bytes) -> None:
        self.context = context
        self.ca_pem = ca_pem


def tls() -> Tls | None:
    """The fake's TLS made now (EC P-256, a day long); None without the ``cryptography`` package
    (then STARTTLS is not offered).  The server's key touches the disk only inside a private
    temporary folder, removed before this returns."""
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        return None
    now = datetime.datetime.now(datetime.timezone.utc)
    loopback = ipaddress.ip_network("127.0.0.1/32")
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "killdrill smtp fake loopback CA")])
    usage = dict.fromkeys(
        ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement"), False
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
                **usage,
            ),
            critical=True,
        )
        .add_extension(
            x509.NameConstraints(
                permitted_subtrees=[x509.DNSName("localhost"), x509.IPAddress(loopback)],
                excluded_subtrees=None,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
                **usage,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    del ca_key  # nothing else will ever be signed by it
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="killdrill-smtp-tls-") as folder:
        pem = Path(folder) / "server.pem"
        pem.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            + cert.public_bytes(serialization.Encoding.PEM)
        )
        context.load_cert_chain(pem)
    return Tls(context, ca.public_bytes(serialization.Encoding.PEM))


def system_trust() -> bytes:
    """The certificates this machine's TLS clients trust by default, to bundle with the fake's CA:
    the file ``SSL_CERT_FILE`` names, else OpenSSL's default file, else certifi's; empty if none."""
    paths = ssl.get_default_verify_paths()
    candidates = [os.environ.get(paths.openssl_cafile_env), paths.cafile, paths.openssl_cafile]
    try:
        import certifi

        candidates.append(certifi.where())
    except ImportError:
        pass
    for path in candidates:
        if path and os.path.isfile(path):
            return Path(path).read_bytes()
    return b""


def _any_login(server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any) -> AuthResult:
    """Accept any credentials: the agent logs in as it does in production, nothing is checked."""
    return AuthResult(success=True)


class _SmtpHandler:
    """aiosmtpd's handler: records, announces, and answers 250 or hangs up.

    ``launch``: the launch whose own address this handler serves (None: the shared address)."""

    def __init__(self, fake: SmtpFake, launch: Hashable | None = None) -> None:
        self.fake = fake
        self.launch = launch

    async def handle_exception(self, error: Exception) -> str:
        """A fake's failure (an unusable ledger) is one SMTP reply, never a traceback on stderr."""
        return f"451 killdrill smtp fake: {type(error).__name__}: {error}"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        loop = asyncio.get_running_loop()
        raw, context = split_context(envelope.original_content or b"")
        transport = server.transport
        here: Any = transport.get_extra_info("sockname") if transport is not None else None
        peer: Any = session.peer  # (host, port) on a TCP socket
        heard = await loop.run_in_executor(
            None,
            functools.partial(
                self.fake.deliver,
                raw,
                envelope.mail_from or "",
                list(envelope.rcpt_tos),
                launch=self.launch,
                context=context,
                pid=peer_pid(tuple(peer), tuple(here)) if isinstance(peer, tuple) and here else 0,
            ),
        )
        if not heard:
            if isinstance(server.transport, asyncio.WriteTransport):  # any socket or TLS transport
                server.transport.abort()
            return "421 closing"
        return "250 OK"


class SmtpFake:
    """The SMTP fake on 127.0.0.1 (a free port), recording to ``ledger`` (a path or URL).

    ``trust_file``: where :meth:`start` writes the certificates a client verifying the fake's
    must trust (the machine's own and the fake's CA), for ``SSL_CERT_FILE``; :attr:`trusted` is
    that path once written (None: no TLS, nothing written)."""

    def __init__(
        self,
        ledger: str,
        *,
        thread: str = "default",
        attempt: int = 1,
        port: int = 0,
        trust_file: str | None = None,
    ) -> None:
        self.ledger_url = ledger
        self.port = port
        self.trust_file = trust_file
        self.trusted: str | None = None
        self.binding = Binding(ledger, thread, attempt, None)
        self._launches: dict[tuple[Hashable, bool], tuple[str, asyncio.AbstractServer]] = {}
        self._bindings: dict[Hashable, Binding] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tls: ssl.SSLContext | None = None
        self.address: str | None = None

    def start(self) -> str:
        """Listen and serve in a background thread; returns ``host:port`` (``KILLDRILL_SMTP``)."""
        if self.address is not None:
            return self.address
        Ledger(self.ledger_url, self.binding.thread)  # fail now, in one line, if the ledger is unusable
        loop = asyncio.new_event_loop()
        material = tls()
        self._tls = material.context if material is not None else None
        if material is not None and self.trust_file is not None:
            staged = Path(self.trust_file + ".new")  # replaced whole: a process reading it never sees half
            staged.write_bytes(system_trust().rstrip(b"\n") + b"\n" + material.ca_pem)
            os.replace(staged, self.trust_file)
            self.trusted = self.trust_file
        server, address = self._listen(loop, _SmtpHandler(self), self.port)
        self._server, self._loop = server, loop
        self._thread = threading.Thread(target=loop.run_forever, name="killdrill-fakes-smtp", daemon=True)
        self._thread.start()
        self.address = address
        return address

    def _listen(
        self, loop: asyncio.AbstractEventLoop, handler: _SmtpHandler, port: int, implicit: bool = False
    ) -> tuple[Any, str]:
        """A server socket on 127.0.0.1:``port`` speaking SMTP to ``handler`` (not yet running);
        ``implicit``: TLS from the first byte, as at port 465 (no STARTTLS inside it)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))

        def serve() -> Any:
            return loop.create_server(
                lambda: SMTP(
                    handler,
                    hostname="killdrill-smtp-fake",
                    enable_SMTPUTF8=True,
                    auth_require_tls=False,  # loopback only; an agent's smtp.login() must just work
                    authenticator=_any_login,
                    data_size_limit=MAX_BODY,  # bounded like the HTTP fakes
                    timeout=REQUEST_DEADLINE_S,
                    tls_context=None if implicit else self._tls,  # STARTTLS offered, never required
                ),
                sock=sock,
                ssl=self._tls if implicit else None,
            )

        server = (
            asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=10)
            if loop.is_running()
            else loop.run_until_complete(serve())
        )
        return server, f"127.0.0.1:{sock.getsockname()[1]}"

    def attempt_address(self, launch: Hashable) -> str:
        """A ``host:port`` of one launch alone (``launch``: the key given to :meth:`bind` again):
        the mail it sends is recorded under its attempt and announced on its channel even while
        other attempts run (concurrent resumers, a paused zombie), as the HTTP fakes' own URL
        per attempt does.  Call start() first."""
        assert self._loop is not None, "start() the server first"
        known = self._launches.get((launch, False))
        if known is None:
            server, address = self._listen(self._loop, _SmtpHandler(self, launch), 0)
            known = self._launches[launch, False] = (address, server)
        return known[0]

    def attempt_tls_address(self, launch: Hashable) -> str | None:
        """As :meth:`attempt_address`, the ``host:port`` where one launch speaks SMTP over implicit
        TLS (``smtplib.SMTP_SSL``, a provider's port 465); None when the fake has no TLS."""
        assert self._loop is not None, "start() the server first"
        if self._tls is None:
            return None
        known = self._launches.get((launch, True))
        if known is None:
            server, address = self._listen(self._loop, _SmtpHandler(self, launch), 0, implicit=True)
            known = self._launches[launch, True] = (address, server)
        return known[0]

    def bind(
        self,
        thread: str,
        attempt: int,
        control_address: str | None = None,
        control_token: str | None = None,
        *,
        launch: Hashable | None = None,
    ) -> None:
        """Record the next messages under ``thread``/``attempt``; announce ``during:`` on that channel.

        Messages to the shared address follow the launch bound last; those to a launch's own
        address (:meth:`attempt_address`) follow that launch, whichever started last."""
        self.binding = Binding.of_attempt(self.ledger_url, thread, attempt, control_address, control_token)
        if launch is not None and any(known == launch for known, _ in self._launches):
            self._bindings[launch] = self.binding

    def deliver(
        self,
        raw: bytes,
        mail_from: str,
        rcpt_tos: list[str],
        *,
        launch: Hashable | None = None,
        pid: int = 0,
        context: dict[str, Any] | None = None,
    ) -> bool:
        """Commit the message (sent by ``pid`` in runtime ``context``, to ``launch``'s address),
        announce ``during:mailbox.send``; False: nobody is left to answer."""
        binding = self._bindings.get(launch, self.binding) if launch is not None else self.binding
        payload, key, message_id = message_record(raw, mail_from, rcpt_tos, binding.thread)
        result = {**payload, "message_id": message_id, "delivered": True}
        record_effect(
            binding.ledger,
            "mailbox",
            "send",
            key,
            payload,
            result,
            prefix="msg",
            ref=message_id,
            attempt=binding.attempt,
            pid=pid,
            context=context,
        )
        if binding.control is not None:
            try:
                binding.control.send("during:mailbox.send")
            except ControlChannelError:
                return False
        return True

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        loop, server, thread = self._loop, self._server, self._thread
        servers = [server, *(s for _, s in self._launches.values())]
        self._loop = self._server = self._thread = None
        self._launches.clear()
        self._bindings.clear()
        self.address = None
        if loop is None or server is None:
            return

        async def shutdown() -> None:
            for each in servers:
                if each is not None:
                    each.close()
            for each in servers:
                if each is not None:
                    await each.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=5)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)
        loop.close()

    def __enter__(self) -> SmtpFake:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

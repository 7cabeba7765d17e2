"""The hooks listener (docs/design.md §12, §14): the admission webhook and the scheduler extender on their
own mutual-TLS port, never on the console's.

``kalena serve --tls-port`` runs one Daphne server with two kinds of listener. The console's plain
port serves the console, the API, the probes and the metrics, and routes nothing under
``/kubernetes/`` (a 404). The hooks port is a Twisted TLS endpoint built from
:class:`twisted.internet.ssl.CertificateOptions` (Daphne's endpoint strings can set neither a
cipher list nor client-certificate verification):

* TLS 1.2 with forward-secret AEAD suites only (``ECDHE+AESGCM:ECDHE+CHACHA20``), TLS 1.3
  (OpenSSL's AEAD suites) whenever the client offers it; nothing older;
* a client certificate is required and verified against ``--tls-client-ca`` (the CA that signs
  the certificates kube-apiserver and kube-scheduler present — not the cluster CA, which also
  signs every kubelet's); a caller without one, or with another CA's, fails the handshake;
* only paths under ``/kubernetes/`` reach Django there, with the hooks' URL map alone
  (:class:`~kalena_web.kubehooks.routing.ListenerRouter`): anything else — the console, the
  API, ``/metrics`` — is a 404.

Each refused handshake and each refused path is counted in ``kalena_hooks_refused_total`` and
audited with the certificate subject offered (or ``anonymous``) and the peer address
(:func:`kalena_web.kubehooks.services.hooks_refusal_record`, run on a worker thread: the reactor
never waits on the database).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zope.interface import implementer

from daphne.server import Server  # first: it installs the asyncio reactor Daphne runs on
from daphne.http_protocol import HTTPFactory  # noqa: I001
from OpenSSL import SSL
from OpenSSL.crypto import X509, PKey
from twisted.internet import reactor
from twisted.internet.interfaces import IProtocolNegotiationFactory
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.ssl import (AcceptableCiphers, Certificate, CertificateOptions, TLSVersion,
                                  trustRootFromCertificates)
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory

from kalena_web.kubehooks.routing import LISTENER_KEY, record_refusal

#: TLS 1.2 suites: ECDHE key exchange (forward secrecy) with an AEAD cipher. TLS 1.3's suites are
#: all of that kind and are OpenSSL's defaults.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
_VERIFY = SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT | SSL.VERIFY_CLIENT_ONCE


class HooksTLSError(ValueError):
    """A certificate, key or CA file of the hooks listener cannot be used; the message names it."""


def _load_certificates(path: str, what: str) -> list:
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise HooksTLSError(f"{what} {path}: {exc}") from None
    return certs


def hooks_tls_options(*, cert_path: str, key_path: str, client_ca_path: str) -> CertificateOptions:
    """The hooks listener's TLS settings (see module doc) from PEM files: ``cert_path`` the
    serving certificate (its chain may follow it), ``key_path`` its key, ``client_ca_path`` the
    CA certificate(s) client certificates must chain to.

    Raises:
        HooksTLSError: a file missing or not PEM, or a key that does not match the certificate.
    """
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    chain = _load_certificates(cert_path, "--tls-cert")
    authorities = _load_certificates(client_ca_path, "--tls-client-ca")
    try:
        key = load_pem_private_key(Path(key_path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise HooksTLSError(f"--tls-key {key_path}: {exc}") from None
    try:
        options = CertificateOptions(
            privateKey=PKey.from_cryptography_key(key), certificate=X509.from_cryptography(chain[0]),
            extraCertChain=[X509.from_cryptography(c) for c in chain[1:]],
            trustRoot=trustRootFromCertificates([Certificate(X509.from_cryptography(c)) for c in authorities]),
            acceptableCiphers=AcceptableCiphers.fromOpenSSLCipherString(TLS12_CIPHERS),
            raiseMinimumTo=TLSVersion.TLSv1_2)
        context = options.getContext()  # built now: a key that does not match fails here, not per connection
    except (SSL.Error, ValueError, TypeError) as exc:
        raise HooksTLSError(f"--tls-cert {cert_path} / --tls-key {key_path}: {exc}") from None
    context.set_verify(_VERIFY, _remember_refused_certificate)
    return options


#: Attribute of a connection's TLS protocol holding the subject of the certificate OpenSSL refused.
_REFUSED_SUBJECT = "kalena_refused_subject"


def _remember_refused_certificate(connection: SSL.Connection, certificate: X509, errno: int, depth: int,
                                  ok: int) -> bool:
    """OpenSSL's verify callback: keep OpenSSL's verdict, and remember the subject of the first
    certificate it refuses (the audit entry's "who") on the connection's TLS protocol (Twisted
    keeps that protocol as the connection's app data)."""
    tls = connection.get_app_data()
    if not ok and tls is not None and not getattr(tls, _REFUSED_SUBJECT, ""):
        setattr(tls, _REFUSED_SUBJECT, _subject(certificate))
    return bool(ok)


def _subject(certificate: X509 | None) -> str:
    if certificate is None:
        return ""
    try:
        return certificate.to_cryptography().subject.rfc4514_string()[:150]
    except ValueError:
        return "(unreadable subject)"


def handshake_refusal(error: SSL.Error) -> str:
    """The counter reason of a refused handshake: ``no_client_certificate``,
    ``bad_client_certificate`` or ``handshake`` (no common version or suite, not TLS at all…)."""
    text = " ".join(str(part) for part in (error.args[0] if error.args else ()))
    if "did not return a certificate" in text:
        return "no_client_certificate"
    if "certificate verify failed" in text or "unknown ca" in text:
        return "bad_client_certificate"
    return "handshake"


class _Watched(ProtocolWrapper):
    """Wraps each hooks connection: a TLS error reported before any request means the handshake
    was refused (Twisted's TLS layer passes OpenSSL's error to ``connectionLost`` only then)."""

    def connectionLost(self, reason) -> None:
        if reason.check(SSL.Error):
            peer = self.transport.getPeer()
            who = self.transport.__dict__.get(_REFUSED_SUBJECT)  # the TLS protocol's own attribute
            reactor.callInThread(record_refusal, endpoint="tls", reason=handshake_refusal(reason.value),
                                       peer=f"{getattr(peer, 'host', peer)}:{getattr(peer, 'port', '')}",
                                       client=who or "anonymous", detail=str(reason.value)[:300])
        super().connectionLost(reason)


@implementer(IProtocolNegotiationFactory)
class _WatchedFactory(WrappingFactory):
    """Wraps the hooks' HTTP factory; offers HTTP/1.1 alone over ALPN (what kube-apiserver and
    kube-scheduler speak; a client offering only h2 still gets HTTP/1.1 without ALPN)."""

    protocol = _Watched

    def acceptableProtocols(self) -> list[bytes]:
        return [b"http/1.1"]


@dataclass(frozen=True)
class HooksListener:
    """Where the hooks listener listens and with which TLS settings (:func:`hooks_tls_options`)."""

    host: str
    port: int
    options: CertificateOptions


def shutdown_watchdog(limit_s: float) -> threading.Timer:
    """Start a daemon timer that, if the process is still alive ``limit_s`` seconds later, prints
    every thread's stack to stderr (what kept it from stopping) and ends the process with status
    130 (interrupted). Returns the timer; a process that exits first never sees it fire."""
    import faulthandler
    import os
    import sys

    def fire() -> None:
        print(f"kalena serve: still stopping after {limit_s:g} s; what was running:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(130)

    timer = threading.Timer(limit_s, fire)
    timer.daemon = True
    timer.start()
    return timer


class KalenaServer(Server):
    """Daphne's server plus the hooks listener: requests arriving there carry
    ``scope["kalena_listener"] == "hooks"`` and the ASGI TLS extension
    (``scope["extensions"]["tls"]["client_cert_name"]``: the verified client's subject)."""

    def __init__(self, *args: Any, hooks: HooksListener | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks = hooks

    #: seconds a Ctrl-C or TERM may take to stop the process before it is ended anyway
    SHUTDOWN_LIMIT_S = 20.0

    def run(self) -> None:
        # once shutdown starts, the process ends within SHUTDOWN_LIMIT_S whatever still runs (a
        # thread pool's worker or a loop pass the interpreter would wait for), naming it first
        reactor.addSystemEventTrigger("before", "shutdown", shutdown_watchdog, self.SHUTDOWN_LIMIT_S)
        if self.hooks is not None:
            self.hooks_factory = _WatchedFactory(HTTPFactory(self))
            endpoint = SSL4ServerEndpoint(reactor, self.hooks.port, self.hooks.options, interface=self.hooks.host)
            listener = endpoint.listen(self.hooks_factory)
            listener.addCallback(self.listen_success)
            listener.addErrback(self.listen_error)
            self.listeners.append(listener)
        super().run()

    def create_application(self, protocol, scope):
        channel = getattr(protocol, "channel", None)
        transport = getattr(channel if channel is not None else protocol, "transport", None)
        if isinstance(transport, _Watched):
            certificate = transport.getPeerCertificate()
            scope = {**scope, LISTENER_KEY: "hooks", "extensions": {**(scope.get("extensions") or {}), "tls": {
                "server_cert": None, "client_cert_chain": [], "client_cert_name": _subject(certificate) or None,
                "client_cert_error": None, "tls_version": None, "cipher_suite": None}}}
        return super().create_application(protocol, scope)

# -*- test-case-name: tests.pool.test_pool -*-
"""
Interests in resources' updates, and the upstream subscriptions they hold open.

Resource subscriptions are counted per key and URI, whoever holds them (each
connection, listen stream, legacy session or event stream that watches a resource
holds one interest): the first interest subscribes upstream, the last one released
unsubscribes.  Interests belong to the key, not to an instance, so an instance that
ends while they are wanted (a crash, a restart, a reload) is replaced at once, after a
crash's back-off, and every wanted URI is subscribed again on the new instance; a
replacement that fails is retried on the same back-off.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.internet.defer import Deferred
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

from mcpx.once import Once
from mcpx.pool.budget import effective_call_timeout
from mcpx.pool.errors import CallTimedOut, ServerUnavailable, TooManyInstances, format_seconds
from mcpx.pool.instance import POOL_LOG, Instance, Slot, scope_for
from mcpx.pool.instances import BUSY_RETRY, Instances
from mcpx.pool.requests import Requests
from mcpx.spec.methods import SUBSCRIBE, UNSUBSCRIBE
from mcpx.upstream.session import UpstreamSession


class Interests:
    """
    Who wants which resource's updates, per key, and the starts scheduled to replace an
    instance that ended while they are wanted.  It watches the instances' lives
    (L{mcpx.pool.instances.LifeWatcher}).
    """

    def __init__(self, instances: Instances, requests: Requests) -> None:
        self.log = POOL_LOG
        self._instances = instances
        self._requests = requests
        #: The start scheduled to replace a slot's instance while interests are held.
        self._revivals: dict[Slot, IDelayedCall] = {}

    # What the instances' lives mean for the interests in them

    def started(self, instance: Instance) -> None:
        """Subscribe a fresh instance to every URI its key's interests want."""
        for uri in tuple(instance.slot.interests):
            self._subscribed(instance, uri).wait().addErrback(
                self._resubscribe_failed, instance, uri
            )

    def start_failed(self, slot: Slot, retry_in: float) -> None:
        """Try again once the back-off has passed, if interests are still held."""
        self._revive_later(slot, retry_in)

    def crashed(self, instance: Instance, retry_in: float) -> None:
        """Say what is watched, and start it again once the back-off has passed."""
        wanted = instance.slot.interests
        if wanted:
            name = instance.name
            self._instances.publish(
                "warning",
                name,
                message=f"server {name!r} ended while {', '.join(sorted(wanted))} "
                f"{'is' if len(wanted) == 1 else 'are'} watched; it is started again in "
                f"{format_seconds(retry_in)} and subscribed again",
            )
            self._revive_later(instance.slot, retry_in)

    def stop(self) -> None:
        """The pool stops: no instance is started again for its interests."""
        for slot in tuple(self._revivals):
            self._cancel_revival(slot)

    # Holding and releasing

    async def subscribe(
        self, server: str, uri: str, *, client: str = "", timeout: float | None = None
    ) -> None:
        """
        Hold one interest in a resource's updates: the first interest of a key in a URI
        subscribes upstream, later ones only count.  The instance is not reaped while
        any interest is held, and is replaced and subscribed again if it ends.  Each
        call that returns needs its own L{unsubscribe}; one that raises held nothing.

        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started now.
        @raise mcpx.wire.errors.RpcError: if the server refused the subscription.
        """
        bound = effective_call_timeout(self._requests.call_timeout, timeout)
        slot = self._instances.slots.slot(server, client)
        # Held before anything is awaited, so the instance cannot be reaped meanwhile and
        # an unsubscribe that races this one finds it counted.
        slot.interests[uri] = slot.interests.get(uri, 0) + 1
        try:
            instance = await self._instances.ready(slot, bound)
            waiting = self._subscribed(instance, uri, bound).wait()
            waiting.addTimeout(bound, self._instances.clock)
            try:
                await waiting
            except DeferredTimeout:
                raise CallTimedOut(server, SUBSCRIBE, bound) from None
        except BaseException:
            # A restart or reload meanwhile carried this interest to the key's new slot.
            self._release(self._instances.slots.existing(slot.key) or slot, uri)
            raise

    def _subscribed(self, instance: Instance, uri: str, bound: float | None = None) -> Once[None]:
        """The upstream subscription of C{instance} to C{uri}, made once for every holder."""
        outcome = instance.subscriptions.get(uri)
        if outcome is not None:
            return outcome
        outcome = instance.subscriptions[uri] = Once()

        def refused(failure: Failure) -> Failure:
            if instance.subscriptions.get(uri) is outcome:
                del instance.subscriptions[uri]
            return failure

        work = Deferred.fromCoroutine(
            self._requests.run(
                instance,
                SUBSCRIBE,
                bound if bound is not None else self._requests.call_timeout,
                _session(instance).subscribe(uri),
            )
        )
        work.addErrback(refused)
        outcome.feed(work)
        return outcome

    def _resubscribe_failed(self, failure: Failure, instance: Instance, uri: str) -> None:
        if instance.ended is not None:
            return  # it ended again; its replacement subscribes afresh
        why = self._instances.masker.mask(failure.getErrorMessage() or repr(failure.value))
        self.log.warn(
            "upstream {server}: subscribing again to {uri} failed: {why}",
            server=instance.name,
            uri=uri,
            why=why,
        )
        self._instances.publish(
            "warning",
            instance.name,
            message=f"server {instance.name!r} was started again but refused the "
            f"subscription to {uri}: {why}; no updates will be delivered for it",
        )

    async def unsubscribe(
        self, server: str, uri: str, *, client: str = "", timeout: float | None = None
    ) -> None:
        """
        Release one interest held by L{subscribe}; the last one unsubscribes upstream,
        and an instance with none left may be reaped again.
        """
        bound = effective_call_timeout(self._requests.call_timeout, timeout)
        config = self._instances.slots.servers.servers.get(server)
        if config is None:
            return  # removed by a reload, which dropped its interests
        slot = self._instances.slots.existing((server, scope_for(config, client)))
        if slot is None or uri not in slot.interests:
            return
        releasing = self._release(slot, uri)
        if releasing is not None:
            instance, method = releasing
            await self._requests.run(instance, method, bound, _session(instance).unsubscribe(uri))

    def _release(self, slot: Slot, uri: str) -> tuple[Instance, str] | None:
        """
        Count one interest in C{uri} released; when it was the last, the instance and
        method to unsubscribe it with (the caller sends it), if it was subscribed.
        """
        left = slot.interests.get(uri, 0) - 1
        if left > 0:
            slot.interests[uri] = left
            return None
        slot.interests.pop(uri, None)
        instance = slot.instance
        if not slot.interests:
            self._cancel_revival(slot)
        if instance is None:
            self._instances.slots.forget(slot)
            return None
        self._instances.idle_again(instance)
        subscribed = instance.subscriptions.pop(uri, None)
        if subscribed is None or not instance.usable:
            return None
        if not subscribed.done:
            # Still being subscribed: unsubscribe once that is through.
            def then(_: object) -> None:
                if uri not in instance.slot.interests and instance.usable:
                    gone = Deferred.fromCoroutine(
                        self._requests.run(
                            instance,
                            UNSUBSCRIBE,
                            self._requests.call_timeout,
                            _session(instance).unsubscribe(uri),
                        )
                    )
                    gone.addErrback(lambda f: None)

            subscribed.wait().addCallbacks(then, lambda _: None)
            return None
        return instance, UNSUBSCRIBE

    def _revive_later(self, slot: Slot, delay: float) -> None:
        """Start C{slot} again after C{delay}, for the interests held in it."""
        if self._instances.stopping or not slot.interests:
            return
        self._cancel_revival(slot)
        self._revivals[slot] = self._instances.clock.callLater(max(delay, 0.0), self._revive, slot)

    def _cancel_revival(self, slot: Slot) -> None:
        revival = self._revivals.pop(slot, None)
        if revival is not None and revival.active():
            revival.cancel()

    def _revive(self, slot: Slot) -> None:
        self._revivals.pop(slot, None)
        if self._instances.stopping or not slot.interests:
            return
        name = slot.key[0]
        if self._instances.slots.existing(slot.key) is not slot:
            return  # restarted, reloaded or removed meanwhile: the new slot revives itself
        if slot.instance is not None:
            return  # someone else started it; its start subscribes
        self.log.info("starting upstream {server} again for its watched resources", server=name)
        try:
            self._instances.start(slot)
        except (ServerUnavailable, TooManyInstances) as e:
            self._revive_later(slot, e.retry_in if e.retry_in is not None else BUSY_RETRY)

    def carry(self, slots: Mapping[str, Slot], why: str) -> None:
        """
        After C{slots} were closed on purpose, make fresh slots for the ones whose
        interests are still held and start them at once (their crashes forgotten).
        """
        for scope, old in slots.items():
            self._cancel_revival(old)
            if not old.interests or self._instances.stopping:
                continue
            name = old.key[0]
            if name not in self._instances.slots.servers:
                self._instances.publish(
                    "warning",
                    name,
                    message=f"server {name!r} is gone ({why}): no updates will be "
                    f"delivered for {', '.join(sorted(old.interests))}",
                )
                continue
            fresh = self._instances.slots.slot(name, scope)
            for uri, count in old.interests.items():
                fresh.interests[uri] = fresh.interests.get(uri, 0) + count
            self._revive_later(fresh, 0.0)


def _session(instance: Instance) -> UpstreamSession:
    """The session of C{instance}, which a started instance has."""
    session = instance.session
    assert session is not None
    return session

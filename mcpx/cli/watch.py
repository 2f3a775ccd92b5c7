# -*- test-case-name: tests.cli.test_watch -*-
"""
Answering, in the terminal, the questions an upstream asks during one C{mcpx call}.

A server may stop in the middle of a tool call to ask something (a form, a model's reply).
C{mcpx call} declares nothing a server could ask it directly, so such a question waits in
the daemon's broker, named after the call that caused it (its C{call_id}).  When the
person who ran the command sits at a terminal, a L{QuestionWatch} looks in the broker
while the call runs and puts that call's questions to them, as C{mcpx elicit ID} would.
A question the daemon could not tie to one call (two calls shared the server) is not
ours to answer, but the person is told where it is.  Without a terminal nobody can be
asked there: the watch instead says once, on standard error, which question the call
waits on and the C{mcpx elicit} command that answers it (L{pointer_line}).

The call itself blocks the main thread on its socket, so the watch runs in a thread of
its own, with its own L{DaemonClient} (a client is one connection at a time, not shared
between threads).  Only L{QuestionWatch.run} and L{QuestionWatch.start} know about
time and threads; L{triage} decides, and the tests drive it all without either.

Importing this module costs little (no click: L{mcpx.cli.elicit} is imported only when a
question arrives).
"""

from __future__ import annotations

import _thread
import os
import sys
import time

from mcpx.cli.client import ApiError
from mcpx.cli.render import error_text
from mcpx.cli.terminal import isatty
from mcpx.ops import routes

# typing stays out of a plain `mcpx call`, which imports this module (tests.cli.test_quick);
# so do collections.abc, contextlib and threading, which with functools are a fifth of what
# a plain call executes: the watch's thread is a bare _thread one.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Set
    from typing import IO, Any, Protocol

    class QuestionSource(Protocol):
        """The part of a L{mcpx.cli.client.DaemonClient} the watch uses."""

        def get(self, target: str, *, timeout: float | None = ...) -> Any: ...

    class Echo(Protocol):
        """Prints one line, on stderr with C{err}."""

        def __call__(self, message: str, *, err: bool = False) -> None: ...

    #: Asks the person for the answer to one question and sends it; raises when it cannot.
    Answerer = Callable[[Any, str], None]

#: Seconds between two looks at the broker.
INTERVAL = 0.25

#: Seconds the end of a call waits for an answer being sent to finish saying so.
SETTLE = 0.5

#: The most characters of a question's message a pointer line shows.
POINTER_MESSAGE = 160


def new_call_id() -> str:
    """A fresh name for one call: C{cli-} and 12 hex digits."""
    return "cli-" + os.urandom(6).hex()


def triage(
    questions: Iterable[Mapping[str, Any]],
    *,
    call_id: str,
    server: str,
    began: float,
    seen: Set[str],
) -> tuple[list[str], list[str]]:
    """
    What to do about the questions the broker lists, for the call C{call_id} to
    C{server} that began at C{began}.

    @param seen: the ids already dealt with (answered, or pointed out), left alone.
    @return: the ids of this call's pending questions, to answer; and the ids of pending
        questions from the same server that no call could claim, asked since the call
        began, to point out.
    """
    ours: list[str] = []
    unclaimed: list[str] = []
    for question in questions:
        question_id = question.get("id")
        if not isinstance(question_id, str) or question_id in seen:
            continue
        if question.get("state") != "pending":
            continue
        owner = question.get("call_id")
        if owner == call_id:
            ours.append(question_id)
        elif owner is None and question.get("server") == server:
            created = question.get("created")
            if isinstance(created, int | float) and created >= began:
                unclaimed.append(question_id)
    return ours, unclaimed


def pointer_line(question: Mapping[str, Any]) -> str:
    """
    The one line that tells a person without a terminal that their call waits on
    C{question}, and the exact command that answers it.
    """
    question_id = question.get("id")
    kind = question.get("kind") or "question"
    said = f"mcpx: the call waits for an answer to {kind} {question_id}"
    server = question.get("server")
    if isinstance(server, str) and server:
        said += f" from {server}"
    params = question.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    if isinstance(message, str) and message.strip():
        # One line, whatever the message holds: newlines and runs of spaces fold.
        shown = " ".join(message.split())
        if len(shown) > POINTER_MESSAGE:
            shown = shown[: POINTER_MESSAGE - 1] + "…"
        said += f" ({shown})"
    return f"{said}; answer it with: mcpx elicit {question_id}"


def answer_in_terminal(client: Any, question_id: str) -> None:
    """C{mcpx elicit ID}'s way of asking: the form, field by field (imports click)."""
    # Deferred for start-up time: the form imports click, and most calls ask nothing.
    from mcpx.cli.elicit import answer_interactively

    with _stdout_on_stderr():
        answer_interactively(client, question_id)


def failure_text(error: BaseException, question_id: str) -> str:
    """What to tell the person when answering C{question_id} failed with C{error}."""
    if isinstance(error, ApiError):
        return error_text(error.body)
    message = getattr(error, "message", None)
    if isinstance(message, str) and message:
        return message
    # click's Abort (the end of input at a prompt) says nothing itself.
    return str(error) or (
        f"question {question_id} was left unanswered; answer it with: mcpx elicit {question_id}"
    )


class QuestionWatch:
    """
    Puts the questions of one call to the person at the terminal, while the call runs.

    @ivar call_id: the call's name, sent with it as C{call_id}.
    @ivar server: the server called.
    @ivar began: when the call began, by C{clock}; a question not tied to any call is
        only pointed out if it was asked since.
    @ivar seen: the questions already dealt with.
    @ivar answering: the id of the question being answered, if one is.
    @ivar points: the watch answers nothing; it names each of the call's questions,
        once, with the command that answers it (L{pointer_line}).
    """

    def __init__(
        self,
        call_id: str,
        server: str,
        *,
        connect: Callable[[], QuestionSource],
        echo: Echo,
        answer: Answerer | None = answer_in_terminal,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
        interval: float = INTERVAL,
        delay: float = 0.0,
    ) -> None:
        """
        @param connect: makes the watch's own client of the daemon.
        @param answer: asks the person and sends their answer; C{None} to point at
            C{mcpx elicit} instead (L{points}).
        @param wait: sleeps up to the given seconds, returning C{True} early when the
            watch is stopped; by default it waits on L{stopped}.
        @param delay: seconds before the first look, so that a call which asks nothing
            and ends soon costs the daemon nothing more.
        """
        self.call_id = call_id
        self.server = server
        self.began = clock()
        self.seen: set[str] = set()
        self.answering: str | None = None
        self.stopped = Flag()
        self._connect = connect
        self._echo = echo
        self._answer = answer
        self.points = answer is None
        self._delay = delay
        self._wait = wait if wait is not None else self.stopped.wait
        self._interval = interval
        #: Held while the watch's thread runs (L{stop} waits on it).
        self._running: Any = None

    def poll(self, client: QuestionSource) -> bool:
        """
        Look in the broker once, and deal with what is new there.

        @return: whether to look again: C{False} once the daemon says it keeps no
            questions (no broker, or a daemon older than C{/v1/questions}).
        """
        try:
            listed = client.get(routes.path("list_questions"))
        except ApiError:
            return False
        except Exception:
            # Not reachable this time (busy, restarting): the call's own answer will say.
            return True
        questions = listed.get("questions") if isinstance(listed, dict) else None
        if not isinstance(questions, list):
            questions = []
        ours, unclaimed = triage(
            questions,
            call_id=self.call_id,
            server=self.server,
            began=self.began,
            seen=self.seen,
        )
        for question_id in unclaimed:
            self.seen.add(question_id)
            self._echo(
                f"mcpx: {self.server} asked a question no single call could claim; "
                f"answer it with: mcpx elicit {question_id}",
                err=True,
            )
        if self._answer is None:
            by_id = {q.get("id"): q for q in questions if isinstance(q, dict)}
            for question_id in ours:
                self.seen.add(question_id)
                self._echo(pointer_line(by_id[question_id]), err=True)
            return True
        for question_id in ours:
            if self.stopped.is_set():
                break
            self.seen.add(question_id)
            self._echo("", err=True)
            self.answering = question_id
            try:
                self._answer(client, question_id)
            except Exception as e:
                self._echo(f"mcpx: {failure_text(e, question_id)}", err=True)
            finally:
                self.answering = None
        return True

    def run(self) -> None:
        """Look every C{interval} seconds (the first after C{delay}) until stopped."""
        if self._delay > 0 and self._wait(self._delay):
            return
        client = self._connect()
        while not self.stopped.is_set():
            if not self.poll(client):
                return
            if self._wait(self._interval):
                return

    def start(self) -> None:
        """Run in a daemon thread: it never keeps the command from exiting."""
        running = self._running = _thread.allocate_lock()
        running.acquire()
        # A _thread thread is what a daemon threading.Thread is: not waited for at exit.
        _thread.start_new_thread(self._run_quietly, (running,))

    def _run_quietly(self, running: Any) -> None:
        try:
            self.run()
        except BaseException:
            # A watch that breaks costs the person a prompt, never the call.
            self.stopped.set()
        finally:
            running.release()

    def stop(self) -> None:
        """
        The call has ended: look no more.  An answer being sent is given a moment to
        say so; one still being typed is left, on a line of its own.
        """
        self.stopped.set()
        running = self._running
        if running is None or self.answering is None:
            return
        if running.acquire(timeout=SETTLE):  # the thread ended
            running.release()
        if self.answering is not None:
            self._echo("", err=True)


class _ThreadStdout:
    """
    Standard output, except for one thread, whose writes go to another stream: the
    questions of a call whose output is redirected are asked on the terminal, not put
    in its output, while the call's own thread writes its result where it always does.
    """

    def __init__(self, stream: IO[str], thread: int, instead: IO[str]) -> None:
        self._stream = stream
        self._thread = thread
        self._instead = instead

    def __getattr__(self, name: str) -> Any:
        target = self._instead if _thread.get_ident() == self._thread else self._stream
        return getattr(target, name)


class _stdout_on_stderr:
    """While it lasts, this thread's standard output is standard error, if that differs."""

    def __enter__(self) -> None:
        self._stdout = stdout = sys.stdout
        stderr = sys.stderr
        if stdout is None or stderr is None or isatty(stdout):
            self._stdout = None
            return
        sys.stdout = _ThreadStdout(stdout, _thread.get_ident(), stderr)

    def __exit__(self, *exc_info: object) -> None:
        if self._stdout is not None:
            sys.stdout = self._stdout


class Flag:
    """
    The part of C{threading.Event} the watch uses (L{set}, L{is_set}, L{wait}), on
    bare locks: see the note on imports above.
    """

    def __init__(self) -> None:
        self._set = False
        self._guard = _thread.allocate_lock()
        #: Held until L{set}: a wait is an acquire with a timeout.
        self._unset = _thread.allocate_lock()
        self._unset.acquire()

    def set(self) -> None:
        with self._guard:
            if not self._set:
                self._set = True
                self._unset.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Wait up to C{timeout} seconds for L{set}; whether it was set."""
        if self._set:
            return True
        if self._unset.acquire(timeout=timeout):
            self._unset.release()  # every other waiter passes too
        return self._set

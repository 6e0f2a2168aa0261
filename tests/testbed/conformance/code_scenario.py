"""Code-interpreter scenario with the official, unmodified Python SDKs
(opensandbox==1.1.1 + opensandbox-code-interpreter==1.1.1) against execd's /code API.

Run with the SDK venv: ``.venv-sdk/bin/python code_scenario.py --mode direct|proxy``.
Reads OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY like the SDK itself.
Exits non-zero with a message at the first mismatch of each part.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta

from code_interpreter import CodeInterpreter
from code_interpreter.models.code import CodeContext, SupportedLanguage
from opensandbox import Sandbox
from opensandbox.config import ConnectionConfig
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.execd import ExecutionHandlers, _format_output_messages

from scenario import Mismatch, check, parse_mode, run, section

MODE = "direct"
IMAGE = "opensandbox/code-interpreter:v1.1.0"
# The image's own entrypoint: it starts the Jupyter server behind /code.
ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]
PY = SupportedLanguage.PYTHON



def config() -> ConnectionConfig:
    return ConnectionConfig(use_server_proxy=(MODE == "proxy"), request_timeout=timedelta(seconds=60))


class Streamed:
    """ExecutionHandlers that record what arrives, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def handlers(self) -> ExecutionHandlers:
        def rec(kind):
            async def on(value):
                self.events.append((kind, value))
            return on

        return ExecutionHandlers(
            on_init=rec("init"), on_stdout=rec("stdout"), on_stderr=rec("stderr"),
            on_result=rec("result"), on_error=rec("error"), on_execution_complete=rec("complete"),
        )

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]

    def texts(self, kind: str) -> list[str]:
        return [v.text for k, v in self.events if k == kind]


class Ctx:
    ci: CodeInterpreter
    first: CodeContext
    second: CodeContext


async def scenario() -> None:
    ctx = Ctx()
    print(f"code interpreter scenario, mode={MODE}, server={os.environ.get('OPEN_SANDBOX_DOMAIN')}", flush=True)
    print("create")
    sandbox = await Sandbox.create(
        IMAGE, entrypoint=ENTRYPOINT, timeout=timedelta(minutes=5), connection_config=config(),
    )
    try:
        # The strict health check probes Jupyter's port ($JUPYTER_PORT) with a command.
        ctx.ci = await CodeInterpreter.create(sandbox, ready_timeout=timedelta(seconds=60))
        check(ctx.ci.id == sandbox.id, "CodeInterpreter.create passed its Jupyter health check")
        for name, fn in (
            ("jupyter on PATH (kernelspec list)", part_kernelspecs),
            ("context: streamed run", part_streamed_run),
            ("context state", part_state),
            ("display data and results", part_rich_results),
            ("exception traceback", part_exception),
            ("interrupt", part_interrupt),
            ("busy context", part_busy),
            ("default context", part_default_context),
            ("list / get / delete contexts", part_contexts),
            ("non-code sandbox", part_plain_sandbox),
        ):
            await section(name, fn, ctx)
    finally:
        try:
            await sandbox.kill()
        except SandboxApiException:
            pass
        await sandbox.close()


async def part_kernelspecs(ctx: Ctx) -> None:
    execution = await ctx.ci.commands.run("jupyter kernelspec list --json")
    check(execution.error is None, "`jupyter kernelspec list --json` runs in the sandbox")
    specs = json.loads(_format_output_messages(execution.logs.stdout))["kernelspecs"]
    check(specs.get("python", {}).get("spec", {}).get("language") == "python",
          f"the image's 'python' kernel is listed (got {sorted(specs)})")


async def part_streamed_run(ctx: Ctx) -> None:
    ctx.first = await ctx.ci.codes.create_context(PY)
    check(bool(ctx.first.id) and ctx.first.language == "python", f"create_context gave {ctx.first}")
    seen = Streamed()
    code = "import sys\nx = 6 * 7\nprint('hello')\nprint('warn', file=sys.stderr)\nx"
    execution = await ctx.ci.codes.run(code, context=ctx.first, handlers=seen.handlers())
    check(execution.id == ctx.first.id, f"init names the context ({execution.id})")
    # Joined: the kernel batches a stream's writes by time (ipykernel flushes every
    # 0.2 s), so `print` can arrive as "warn" and "\n" on a busy machine.
    check("".join(seen.texts("stdout")) == "hello\n", f"on_stdout got {seen.texts('stdout')}")
    check("".join(seen.texts("stderr")) == "warn\n", f"on_stderr got {seen.texts('stderr')}")
    check(seen.texts("result") == ["42"], f"on_result got {seen.texts('result')}")
    check([r.text for r in execution.result] == ["42"], "the execution keeps the result")
    check(execution.error is None and execution.complete is not None, "completed without error")
    check(execution.execution_count is not None and execution.execution_count >= 1,
          f"execution_count {execution.execution_count}")
    check(seen.kinds()[0] == "init" and "error" not in seen.kinds(), f"handler order {seen.kinds()}")


async def part_state(ctx: Ctx) -> None:
    again = await ctx.ci.codes.run("x + 1", context=ctx.first)
    check([r.text for r in again.result] == ["43"], "a variable persists in its context")
    ctx.second = await ctx.ci.codes.create_context(PY)
    check(ctx.second.id != ctx.first.id, "a second context has its own id")
    other = await ctx.ci.codes.run("x", context=ctx.second)
    check(other.error is not None and other.error.name == "NameError",
          f"and its own state: x is undefined there ({other.error and other.error.name})")
    cwd = await ctx.ci.codes.run("import os; os.getcwd()", context=ctx.first)
    home = await ctx.ci.commands.run("pwd")
    check([r.text for r in cwd.result] == [repr(_format_output_messages(home.logs.stdout).strip())],
          f"a context without cwd runs in the sandbox's working directory ({cwd.result[0].text})")


async def part_rich_results(ctx: Ctx) -> None:
    code = (
        "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
        "import matplotlib.pyplot as plt\nfrom IPython.display import display\n"
        "display('shown, not returned')\nfig = plt.figure(); plt.plot([1, 2, 3]); plt.close(fig)\nfig"
    )
    seen = Streamed()
    execution = await ctx.ci.codes.run(code, context=ctx.first, handlers=seen.handlers())
    check(execution.error is None, f"matplotlib runs in the kernel ({execution.error})")
    # execd forwards execute_result only: display() output (display_data) is not an event.
    texts = [r.text for r in execution.result]
    check(len(texts) == 1 and texts[0].startswith("<Figure size"),
          f"a figure as the last expression is one result (got {texts})")


async def part_exception(ctx: Ctx) -> None:
    seen = Streamed()
    code = "def inner():\n    raise ValueError('boom')\n\ninner()"
    execution = await ctx.ci.codes.run(code, context=ctx.first, handlers=seen.handlers())
    err = execution.error
    check(err is not None and err.name == "ValueError" and err.value == "boom",
          f"error name/value ({err and (err.name, err.value)})")
    joined = "\n".join(err.traceback)
    check("inner()" in joined and "ValueError" in joined and len(err.traceback) >= 2,
          f"the traceback shows the call ({len(err.traceback)} lines)")
    check(seen.kinds().count("error") == 1 and not seen.texts("result"), f"events {seen.kinds()}")


async def interrupted_run(ctx: Ctx, code: str):
    """Starts `code`, interrupts it once it runs, returns its execution."""
    started = asyncio.Event()

    async def on_init(_):
        started.set()

    handlers = ExecutionHandlers(on_init=on_init)
    task = asyncio.create_task(ctx.ci.codes.run(code, context=ctx.first, handlers=handlers))
    await asyncio.wait_for(started.wait(), 30)
    await asyncio.sleep(0.5)
    return task


async def part_interrupt(ctx: Ctx) -> None:
    task = await interrupted_run(ctx, "n = 0\nwhile True:\n    n += 1")
    await ctx.ci.codes.interrupt(ctx.first.id)
    execution = await asyncio.wait_for(task, 30)
    check(execution.error is not None and execution.error.name == "KeyboardInterrupt",
          f"an interrupted loop ends with KeyboardInterrupt ({execution.error and execution.error.name})")
    after = await ctx.ci.codes.run("n > 0", context=ctx.first)
    check([r.text for r in after.result] == ["True"], "the context lives on with the loop's state")


async def part_busy(ctx: Ctx) -> None:
    task = await interrupted_run(ctx, "import time\ntime.sleep(30)")
    try:
        busy = await ctx.ci.codes.run("1", context=ctx.first)
        # execd answers 200 with init, then a bare {"code","message"} the SDK turns into an error.
        check(busy.error is not None and busy.error.name == "RUNTIME_ERROR"
              and "session is busy" in busy.error.value,
              f"a second run on a busy context is refused ({busy.error and (busy.error.name, busy.error.value)})")
    finally:
        await ctx.ci.codes.interrupt(ctx.first.id)
        await asyncio.wait_for(task, 30)


async def part_default_context(ctx: Ctx) -> None:
    first = await ctx.ci.codes.run("y = 5\ny * 2")
    check([r.text for r in first.result] == ["10"], "a run without context uses the language's default")
    again = await ctx.ci.codes.run("y + 1", language=PY)
    check([r.text for r in again.result] == ["6"], "the default context keeps its state")
    check(again.id not in (ctx.first.id, ctx.second.id), "it is a context of its own")


async def part_contexts(ctx: Ctx) -> None:
    listed = {c.id for c in await ctx.ci.codes.list_contexts(PY)}
    check({ctx.first.id, ctx.second.id} <= listed and len(listed) == 3,
          f"list_contexts shows both contexts and the default one ({len(listed)})")
    got = await ctx.ci.codes.get_context(ctx.second.id)
    check(got.id == ctx.second.id and got.language == "python", "get_context")
    await ctx.ci.codes.delete_context(ctx.second.id)
    listed = {c.id for c in await ctx.ci.codes.list_contexts(PY)}
    check(ctx.second.id not in listed, "delete_context removes it")
    try:
        await ctx.ci.codes.get_context(ctx.second.id)
    except SandboxApiException as exc:
        check(exc.status_code == 404, f"a deleted context is 404 ({exc.status_code})")
    else:
        raise Mismatch("get_context of a deleted context did not fail")
    try:
        await ctx.ci.codes.run("1", context=ctx.second)
    except SandboxApiException as exc:
        check(exc.status_code == 500 and "context not found" in str(exc),
              f"running in a deleted context is 500 context not found ({exc.status_code})")
    else:
        raise Mismatch("run in a deleted context did not fail")
    await ctx.ci.codes.delete_contexts(PY)
    check(await ctx.ci.codes.list_contexts(PY) == [], "delete_contexts(python) removes them all")


async def part_plain_sandbox(ctx: Ctx) -> None:
    plain = await Sandbox.create("python:3.11", timeout=timedelta(minutes=2), connection_config=config())
    try:
        ci = await CodeInterpreter.create(plain, skip_health_check=True)
        try:
            await ci.codes.run("1 + 1")
        except SandboxApiException as exc:
            check(exc.status_code == 500 and "language runtime server not configured" in str(exc),
                  f"without Jupyter /code is 500 'not configured' ({exc.status_code})")
        else:
            raise Mismatch("/code on a sandbox without Jupyter did not fail")
        check(await ci.codes.list_contexts(PY) == [], "and lists no contexts")
        await ci.aclose()
    finally:
        await plain.kill()
        await plain.close()


def main() -> int:
    global MODE
    MODE = parse_mode()
    return run(f"code interpreter ({MODE})", scenario, ("opensandbox", "code_interpreter"))


if __name__ == "__main__":
    sys.exit(main())

"""nbgrader's Execute step, hardened for hostile notebooks and busy machines.

Output is capped: per cell, per notebook, and the widgets' state (widget_budget.py). A cell's time limit
counts the time the machine gave it (cell_clock.py); a cell past it is interrupted, only that cell fails.
A kernel that dies (os._exit, a crash, a memory kill) or does not come back to idle within `iopub_timeout`
seconds after a cell's reply or its interrupt no longer fails the whole submission: the cells from there
on get an error output, so their tests score 0, and the notebook is marked for review. Where the machine,
not the student's code, was at fault, the output is named MACHINE_BUSY: the grader grades it again.
"""

from __future__ import annotations

import os

from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert.preprocessors.execute import NotebookClient
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Float, Integer

from course_lib.grading.sandbox.cell_clock import OVER_LIMIT, WITHIN, CellClock
from course_lib.grading.sandbox.widget_budget import WidgetBudget, output_size

KERNEL_DIED = "KernelDied"
KERNEL_STUCK = "KernelUnresponsive"
KERNEL_SILENT = "KernelSilent"   # replied, then never reported idle though the machine gave it time
MACHINE_BUSY = "GradingMachineBusy"
CELL_TIMEOUT = "CellTimeoutError"
OUTPUT_TRUNCATED = "... output truncated by the grader: this cell printed more than {limit} bytes ..."
NOTEBOOK_CUT = " (the notebook's cells together reached the grader's limit of {limit} bytes)"
WIDGETS_CUT = (" (its widgets' state: what took the notebook's widgets past that limit was dropped, and "
               "they may show empty)")
CHECK_EVERY_S = 2.0   # how often a running cell's clock is read
# The error names the grader writes itself, which its review and its retry read: an exception of one of
# these names raised by the notebook's own code is renamed, so it can neither write a review note nor
# make the grader grade the submission again.
RESERVED_NAMES = (KERNEL_DIED, KERNEL_STUCK, KERNEL_SILENT, MACHINE_BUSY, CELL_TIMEOUT, "IsolatedCheckFailed")
STUDENT_RAISED = " (raised by the notebook's code)"
MAX_ENAME_CHARS, MAX_EVALUE_CHARS = 200, 20_000   # an error's name and text, as kept


def safe_text(value):
    """value with every string in it (keys too) writable as UTF-8: a lone surrogate the kernel sent
    ("\\ud800") becomes "?". Without this nbgrader saved the scores, failed to write the notebook and
    dropped it."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return type(value)((safe_text(k), safe_text(v)) for k, v in value.items())
    if isinstance(value, list):
        return [safe_text(item) for item in value]
    return value


def _disown(content):
    """A kernel message's content with a reserved error name the notebook's code raised renamed, and its
    error's name and text bounded (the output cap counts an error's traceback, not these two)."""
    if isinstance(content, dict) and isinstance(content.get("ename"), str):
        content = dict(content, ename=content["ename"][:MAX_ENAME_CHARS])
    if isinstance(content, dict) and isinstance(content.get("evalue"), str):
        content = dict(content, evalue=content["evalue"][:MAX_EVALUE_CHARS])
    if isinstance(content, dict) and content.get("ename") in RESERVED_NAMES:
        content = dict(content, ename=content["ename"] + STUDENT_RAISED)
    return content


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def kernel_died_output(cell_index: int, died_at: int) -> NotebookNode:
    where = "while running this cell" if cell_index == died_at else f"in cell {died_at + 1}, earlier"
    return error_output(KERNEL_DIED, f"the Python kernel died {where} (os._exit, a crash or the memory "
                                     "limit); this cell did not run and scores 0. An instructor will review "
                                     "this notebook.")


def stopped_output(cell_index: int, stopped_at: int, ename: str, why: str) -> NotebookNode:
    """Under the cell where the kernel stopped answering (why) and each cell after it (did not run)."""
    if cell_index == stopped_at:
        return error_output(ename, why)
    return error_output(ename, f"this cell did not run: the kernel stopped answering in cell "
                               f"{stopped_at + 1} and was shut down; it scores 0")


class SandboxedExecute(Execute):
    """Execute with a per-cell output budget, a load-fair time limit and survival of a lost kernel."""

    max_output_bytes = Integer(
        1_000_000, help="Bytes of output one cell may keep; the rest is dropped with a note."
    ).tag(config=True)
    max_notebook_output_bytes = Integer(
        20_000_000, help="Bytes of output all cells together may keep; the rest is dropped with a note."
    ).tag(config=True)
    busy_stretch = Float(
        6.0, help="While the machine is busy a cell may run up to this many times its limit in wall time."
    ).tag(config=True)
    iopub_timeout = Integer(
        60, help="Seconds the kernel has to report idle after a cell's reply or interrupt (nbclient: 4)."
    ).tag(config=True)

    def output(self, outs, msg, display_id, cell_index):
        if cell_index in self._cut:
            return None  # already truncated: drop the flood without storing it
        msg["content"] = _disown(safe_text(msg.get("content", {})))
        used, limit = self._output_bytes.get(cell_index, 0), self._limit(cell_index)
        if self.output_hook_stack[msg.get("parent_header", {}).get("msg_id")]:
            # an Output widget (nbclient's OutputWidget) keeps it in its own state, not in the cell's
            # outputs: it counts against the cell's cap the same, and past it is dropped
            kind = "stream" if msg.get("msg_type") == "stream" else ""
            size = output_size({**msg["content"], "output_type": kind})
            if used + size > limit:
                self._cut_cell(outs, cell_index)
                return None
            self._count(cell_index, used + size)
            return super().output(outs, msg, display_id, cell_index)
        out = super().output(outs, msg, display_id, cell_index)
        if out is None:
            return None
        size = output_size(out)
        if used + size <= limit:
            self._count(cell_index, used + size)
            return out
        if out.get("output_type") == "stream":
            out["text"] = out["text"][:max(0, limit - used)]
            self._count(cell_index, used + len(out["text"]))
        elif out in outs:
            outs.remove(out)
        self._cut_cell(outs, cell_index)
        return out

    def _limit(self, cell_index: int) -> int:
        """What this cell may keep: its cap, or less once the notebook's outputs near theirs."""
        elsewhere = self._notebook_bytes - self._output_bytes.get(cell_index, 0)
        return min(self.max_output_bytes, self.max_notebook_output_bytes - elsewhere)

    def _count(self, cell_index: int, used: int) -> None:
        self._notebook_bytes += used - self._output_bytes.get(cell_index, 0)
        self._output_bytes[cell_index] = used

    def _cut_cell(self, outs, cell_index: int) -> None:
        """The cell keeps nothing more; the note says which limit it reached (review reads it)."""
        self._cut.add(cell_index)
        whole = self._limit(cell_index) < self.max_output_bytes
        outs.append(self._truncated_note(NOTEBOOK_CUT.format(limit=self.max_notebook_output_bytes)
                                         if whole else ""))

    def _update_display_id(self, display_id, msg):
        """An update replaces every output shown under its display id: each copy counts against its cell's
        cap (nbclient applied it uncounted: 20 small displays updated with 500 KB each wrote 10 MB)."""
        size = output_size({**(msg.get("content") or {}), "output_type": ""})
        shown = self._display_id_map.get(display_id, {})
        grown = {index: self._output_bytes.get(index, 0) + size * len(outputs)
                 for index, outputs in shown.items()}
        over = [index for index, used in grown.items() if index in self._cut or used > self._limit(index)]
        for index in over:
            if index not in self._cut:
                self._cut_cell(self.nb.cells[index].outputs, index)
        if not over:
            for index, used in grown.items():
                self._count(index, used)
            super()._update_display_id(display_id, msg)

    def _truncated_note(self, what: str = "") -> NotebookNode:
        return NotebookNode(output_type="stream", name="stderr",
                            text="\n" + OUTPUT_TRUNCATED.format(limit=self.max_output_bytes) + what + "\n")

    def handle_comm_msg(self, outs, msg, cell_index):
        """A widget's state is kept only while the notebook's widgets fit the cap (noted as output is)."""
        if self.store_widget_state and not self._widgets.admit(msg):
            if cell_index not in self._widgets_cut:
                self._widgets_cut.add(cell_index)
                outs.append(self._truncated_note(WIDGETS_CUT))
            return None
        return super().handle_comm_msg(outs, msg, cell_index)

    def on_cell_executed(self, **kwargs):
        reply = kwargs.get("execute_reply") or {}
        if reply.get("content", {}).get("ename") != getattr(self, "_interrupted", None):
            reply["content"] = _disown(reply["content"])   # the kernel's reply, not the grader's own
        return super().on_cell_executed(**kwargs)

    # --- the time limit: nbclient asks every CHECK_EVERY_S whether the cell may run on ---------------
    def _get_timeout(self, cell):
        limit = super()._get_timeout(cell)
        return limit if cell is None or limit is None else min(limit, CHECK_EVERY_S)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        limit = super()._get_timeout(cell)
        root_pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
        self._clock = CellClock(limit, self.busy_stretch, root_pid) if limit else None
        self._interrupted = None
        return await super().async_execute_cell(cell, cell_index, execution_count, store_history)

    execute_cell = run_sync(async_execute_cell)  # nbclient binds its own coroutine here

    async def _async_handle_timeout(self, timeout, cell=None):
        clock = getattr(self, "_clock", None)
        if cell is None or clock is None:
            return await super()._async_handle_timeout(timeout, cell)
        verdict = clock.verdict()
        if verdict is WITHIN:
            return None  # no reply yet, but time left: nbclient waits another CHECK_EVERY_S
        if verdict == OVER_LIMIT:
            ename = CELL_TIMEOUT
            why = f"this cell ran past its time limit ({clock.limit:g} s; it had {clock.describe()})"
        else:
            ename = MACHINE_BUSY
            why = (f"the grading machine was too busy to give this cell its {clock.limit:g} s "
                   f"(it had {clock.describe()})")
        why += " and was interrupted"
        grade_id = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id", "")
        # failures.machine_fault reads this line: the grade_id is the notebook's, so it may not hold ": "
        self.log.error("cell %s: %s: %s", str(grade_id).replace(":", "_")[:100], ename, why)
        self._interrupted = ename
        await ensure_async(self.km.interrupt_kernel())
        reply = {"status": "error", "ename": ename, "evalue": why, "traceback": [f"{ename}: {why}"]}
        return {"content": reply}  # nbgrader's on_cell_executed writes it under the cell

    # --- the notebook: a dead or stuck kernel costs the cells from there on, never the whole notebook ---
    def preprocess(self, nb, resources=None, km=None):
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._output_bytes: dict[int, int] = {}
        self._notebook_bytes, self._cut = 0, set()   # all cells' counted bytes; cells truncated
        self._widgets, self._widgets_cut = WidgetBudget(self.max_output_bytes), set()
        lost = None   # (cell index, how the kernel was lost)
        try:
            with self.setup_kernel():
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                if info_msg is None:
                    raise RuntimeError("the kernel did not answer kernel_info in time")
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                lost = self._run_cells(resources)
                if lost is not None:
                    self.shutdown_kernel = "immediate"  # a stuck kernel would not answer a polite request
        except Exception:
            if lost is None:
                raise  # a real failure of the grader (a kernel that never started), not of the notebook
            self.log.warning("the kernel was lost; shutting it down raised", exc_info=True)
        if lost is not None:
            self._mark_not_run(*lost)
        self.set_widgets_metadata()
        for cell in self.nb.cells:   # whatever else the kernel sent (a reply's error, widget state)
            if "outputs" in cell:
                cell.outputs = safe_text(cell.outputs)
        self.nb.metadata = safe_text(self.nb.metadata)
        return self.nb, self.resources

    def _run_cells(self, resources) -> tuple[int, str] | None:
        for index, cell in enumerate(self.nb.cells):
            try:
                self.preprocess_cell(cell, resources, index)
            except DeadKernelError:
                return index, KERNEL_DIED
            except CellTimeoutError:  # nbclient's wait for the kernel to report idle ran out
                if self._interrupted == CELL_TIMEOUT:
                    return index, KERNEL_STUCK
                # interrupted as too busy, or replied and then silent while starved of cores: the
                # machine's fault; silent while the machine gave it time: the notebook's code (it can
                # swallow the kernel's idle status), which must not buy a second attempt
                busy = self._interrupted == MACHINE_BUSY or self._starved_while_silent()
                return index, MACHINE_BUSY if busy else KERNEL_SILENT
        return None

    def _starved_while_silent(self) -> bool:
        """Whether the kernel's processes spent most of the wait for its idle status waiting for a core
        (the grader's own measurement, cell_clock.py; without a clock, the machine's load)."""
        clock = getattr(self, "_clock", None)
        if clock is None:
            return os.getloadavg()[0] > (os.cpu_count() or 1)
        charged, wall = clock.charged, clock.wall
        clock.verdict()
        waited = clock.wall - wall
        return waited > 0 and clock.charged - charged < waited / 2

    def _why_lost(self, how: str) -> str:
        if how == KERNEL_STUCK:
            return ("this cell ran past its time limit and the kernel did not stop when interrupted; it was "
                    f"shut down after {self.iopub_timeout} s, so this cell and the ones after it score 0. "
                    "An instructor will review this notebook.")
        if how == KERNEL_SILENT:
            return (f"the kernel answered this cell but did not report back within {self.iopub_timeout} s "
                    "while the machine gave it time (the notebook's code kept it from answering); it was "
                    "shut down, so this cell and the ones after it score 0. An instructor will review this "
                    "notebook.")
        return (f"the kernel did not report back within {self.iopub_timeout} s: the grading machine was too "
                "busy; this cell and the ones after it did not run")

    def _mark_not_run(self, stopped_at: int, how: str) -> None:
        self.log.warning("the kernel was lost in cell %d (%s); the cells from there on score 0",
                         stopped_at + 1, how)
        for index in range(stopped_at, len(self.nb.cells)):
            cell = self.nb.cells[index]
            if cell.cell_type == "code":
                cell.outputs = [o for o in cell.get("outputs", []) if index == stopped_at]
                cell.outputs.append(kernel_died_output(index, stopped_at) if how == KERNEL_DIED
                                    else stopped_output(index, stopped_at, how, self._why_lost(how)))

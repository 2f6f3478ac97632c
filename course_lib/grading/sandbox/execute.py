"""nbgrader's Execute step, hardened for hostile notebooks: capped output and a kernel that may die.

A cell that prints 100 MB keeps only the first `max_output_bytes` of it; a kernel that dies
(os._exit, a crash, a memory kill) no longer fails the whole submission: every cell from the one that
killed it on gets an error output, so its tests score 0, and the notebook is marked for review.
"""

from __future__ import annotations

from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors.execute import NotebookClient
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

KERNEL_DIED = "KernelDied"
OUTPUT_TRUNCATED = "... output truncated by the grader: this cell printed more than {limit} bytes ..."


def _output_size(output: NotebookNode) -> int:
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    data = output.get("data", {}) or {}
    return sum(len(str(value)) for value in data.values()) + len("".join(output.get("traceback", [])))


def kernel_died_output(cell_index: int, died_at: int) -> NotebookNode:
    where = "while running this cell" if cell_index == died_at else f"in cell {died_at + 1}, earlier"
    return NotebookNode(
        output_type="error", ename=KERNEL_DIED,
        evalue=f"the Python kernel died {where} (os._exit, a crash or the memory limit); "
               "this cell did not run and scores 0. An instructor will review this notebook.",
        traceback=[f"{KERNEL_DIED}: the kernel died {where}; this cell did not run"])


class SandboxedExecute(Execute):
    """Execute with a per-cell output budget and survival of a dead kernel."""

    max_output_bytes = Integer(
        1_000_000, help="Bytes of output one cell may keep; the rest is dropped with a note."
    ).tag(config=True)

    def output(self, outs, msg, display_id, cell_index):
        used = self._output_bytes.get(cell_index, 0)
        if used > self.max_output_bytes:
            return None  # already truncated: drop the flood without storing it
        out = super().output(outs, msg, display_id, cell_index)
        if out is None:
            return None
        used += _output_size(out)
        self._output_bytes[cell_index] = used
        if used > self.max_output_bytes:
            keep = max(0, self.max_output_bytes - (used - _output_size(out)))
            if out.get("output_type") == "stream":
                out["text"] = out["text"][:keep]
            elif out in outs:
                outs.remove(out)
            outs.append(NotebookNode(output_type="stream", name="stderr",
                                     text="\n" + OUTPUT_TRUNCATED.format(limit=self.max_output_bytes) + "\n"))
        return out

    def preprocess(self, nb, resources=None, km=None):
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._output_bytes: dict[int, int] = {}
        died_at = None
        try:
            with self.setup_kernel():
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                for index, cell in enumerate(self.nb.cells):
                    try:
                        self.preprocess_cell(cell, resources, index)
                    except DeadKernelError:
                        died_at = index
                        break
        except Exception:
            if died_at is None:
                raise  # a real failure of the grader, not of the student's notebook
            self.log.warning("kernel died; shutting it down raised", exc_info=True)
        if died_at is not None:
            self._mark_not_run(died_at)
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _mark_not_run(self, died_at: int) -> None:
        self.log.warning("the kernel died in cell %d; the cells from there on score 0", died_at + 1)
        for index in range(died_at, len(self.nb.cells)):
            cell = self.nb.cells[index]
            if cell.cell_type == "code":
                cell.outputs = [o for o in cell.get("outputs", []) if index == died_at]
                cell.outputs.append(kernel_died_output(index, died_at))

"""The ipywidgets explorers build, react to a control, and turn bad combinations into a message."""

from course_lib import viz


def test_pipeline_explorer_updates_and_explains_bad_input():
    w = viz.pipeline_explorer()
    before = w.summary.value
    w.controls["micro-batches"].value = 16
    assert w.summary.value != before and "bubble" in w.summary.value
    w.controls["schedule"].value = "interleaved_1f1b"
    w.controls["virtual stages"].value = 2
    w.controls["micro-batches"].value = 2
    assert "multiple of the stage" in w.summary.value and w.last_figure is None


def test_zero_memory_explorer_reports_out_of_memory():
    w = viz.zero_memory_explorer()
    assert "fits" in w.summary.value
    w.controls["ZeRO stage"].value = 0
    w.controls["pp"].value = 1
    w.controls["tp"].value = 1
    assert "out of memory by" in w.summary.value


def test_data_parallel_explorer_reacts_to_the_network():
    w = viz.data_parallel_explorer()
    fast = w.summary.value
    w.controls["inter-node GB/s"].value = 1.25
    assert w.summary.value != fast and "scaling efficiency" in w.summary.value


def test_layout_explorer_shows_a_step_and_refuses_non_dividing_layouts():
    w = viz.layout_explorer()
    assert "MFU" in w.summary.value
    w.controls["nodes"].value = 1
    w.controls["cp"].value = 4
    assert "does not divide" in w.summary.value or "multiply" in w.summary.value


def test_zero_memory_explorer_covers_zero_3_with_pipeline_parallel():
    w = viz.zero_memory_explorer()
    w.controls["pp"].value = 4
    w.controls["ZeRO stage"].value = 1
    zero1 = w.summary.value
    w.controls["ZeRO stage"].value = 3
    assert "worst stage" in w.summary.value and w.last_figure is not None
    gigabytes = [float(text.split("worst stage ")[1].split(" GB")[0]) for text in (zero1, w.summary.value)]
    assert gigabytes[1] < gigabytes[0]

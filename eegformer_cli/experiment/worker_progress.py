"""What the progress bar shows while worker processes train a run's folds and its final
model: the workers send each epoch's record up a queue, and a thread in the parent keeps one
epoch bar per running fold, as a run in one process shows them.
"""

from __future__ import annotations

import contextlib
import threading

#: The final model's name on the progress bar of a run on workers.
FINAL_NAME = "final model"


def shown_fields(record: dict) -> dict:
    """What the progress bar shows of an epoch's history record."""
    return {key: record.get(key) for key in ("epoch", "train_loss", "val_bac")}


class _WorkerProgress:
    """Each fold's epochs on the progress bar while workers train them (as a run in
    one process shows them): a thread reads ``queue`` (``(name, record)`` from the workers) and keeps one
    task per running fold; :meth:`finished` removes a fold's task."""

    def __init__(self, queue, bar, epochs: int):
        self.queue, self.bar, self.epochs = queue, bar, epochs
        self.tasks: dict[str, int] = {}
        self.done: set[str] = set()
        self.thread = threading.Thread(target=self._show, daemon=True)
        self.thread.start()

    def _show(self) -> None:
        while (item := self.queue.get()) is not None:
            name, record = item
            if record is None:
                self.done.add(name)
                if name in self.tasks:
                    self.bar.remove_task(self.tasks.pop(name))
            elif name not in self.done:  # an epoch line may arrive after its fold's end
                if name not in self.tasks:
                    label = name if name == FINAL_NAME else f"fold {name}"
                    self.tasks[name] = self.bar.add_task(label, total=self.epochs, status="")
                val_bac = record.get("val_bac")
                self.bar.update(
                    self.tasks[name],
                    completed=record["epoch"],
                    status=f"loss {record.get('train_loss') or 0:.3f} val BAC "
                    + ("n/a" if val_bac is None else f"{val_bac:.3f}"),
                )

    def finished(self, name: str) -> None:
        self.queue.put((name, None))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


class _NoWorkers:
    """:class:`_WorkerProgress` of a run without workers: nothing to show."""

    def finished(self, name: str) -> None:
        pass


@contextlib.contextmanager
def worker_progress(pool, bar, epochs: int):
    """A :class:`_WorkerProgress` for ``pool`` (closed on leaving), or :class:`_NoWorkers`."""
    if pool is None:
        yield _NoWorkers()
        return
    shown = _WorkerProgress(pool.progress, bar, epochs)
    try:
        yield shown
    finally:
        shown.close()

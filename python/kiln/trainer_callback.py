"""Hugging Face's callback API: TrainerCallback, TrainerState, TrainerControl and the built-in
callbacks, with HF's names and signatures.

    class Recorder(kiln.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            print(state.global_step, logs)
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 100:
                control.should_training_stop = True   # or return a TrainerControl

Every event is called as `on_<event>(args, state, control, **kwargs)` with kwargs model,
processing_class (None), optimizer, lr_scheduler, train_dataloader, eval_dataloader, plus metrics
(on_evaluate, on_predict), logs (on_log) and Kiln's loss (on_step_end, on_substep_end). `state` and
`control` are the running Trainer's own: setting a flag on control steers the C++ loop. Events a
subclass does not override cost nothing: the loop does not call into Python for them.

The built-in callbacks (DefaultFlowCallback, ProgressCallback, PrinterCallback,
EarlyStoppingCallback, TensorBoardCallback) are Kiln's C++ ones; subclassing them in Python works,
and super().on_evaluate(...) reaches the C++ code.
"""
import abc

from kiln._core import core

TrainerState = core.TrainerState
TrainerControl = core.TrainerControl
DefaultFlowCallback = core.DefaultFlowCallback
ProgressCallback = core.ProgressCallback
PrinterCallback = core.PrinterCallback
EarlyStoppingCallback = core.EarlyStoppingCallback
TensorBoardCallback = core.TensorBoardCallback


# An ABC without abstract methods (all hooks are optional, as in HF) for TrainerCallback.register below.
class TrainerCallback(metaclass=abc.ABCMeta):  # noqa: B024
    """HF's TrainerCallback: every event does nothing. Subclasses need not call __init__."""

    def on_init_end(self, args, state, control, **kwargs):
        pass

    def on_train_begin(self, args, state, control, **kwargs):
        pass

    def on_train_end(self, args, state, control, **kwargs):
        pass

    def on_epoch_begin(self, args, state, control, **kwargs):
        pass

    def on_epoch_end(self, args, state, control, **kwargs):
        pass

    def on_step_begin(self, args, state, control, **kwargs):
        pass

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        pass

    def on_optimizer_step(self, args, state, control, **kwargs):
        pass

    def on_substep_end(self, args, state, control, **kwargs):
        pass

    def on_step_end(self, args, state, control, **kwargs):
        pass

    def on_evaluate(self, args, state, control, **kwargs):
        pass

    def on_predict(self, args, state, control, metrics, **kwargs):
        pass

    def on_save(self, args, state, control, **kwargs):
        pass

    def on_log(self, args, state, control, **kwargs):
        pass

    def on_prediction_step(self, args, state, control, **kwargs):
        pass


# The C++ callbacks count as TrainerCallbacks for isinstance / issubclass.
TrainerCallback.register(core.CppTrainerCallback)


class CallbackHandler:
    """trainer.callback_handler: the Trainer's callbacks, in the order events reach them (HF's
    CallbackHandler; the list lives in the C++ Trainer)."""

    def __init__(self, trainer_core):
        self._core = trainer_core

    @property
    def callbacks(self):
        return list(self._core.callbacks())

    @property
    def callback_list(self):
        return "\n".join(type(cb).__name__ for cb in self.callbacks)

    def add_callback(self, callback):
        """A class (instantiated with no arguments) or an instance; appended."""
        cb = callback() if isinstance(callback, type) else callback
        self._core.add_callback(cb)

    def pop_callback(self, callback):
        """Removes and returns the first callback of that class, or that instance; None if absent."""
        for index, cb in enumerate(self.callbacks):
            if (isinstance(callback, type) and isinstance(cb, callback)) or cb is callback:
                return self._core.pop_callback_at(index)
        return None

    def remove_callback(self, callback):
        self.pop_callback(callback)

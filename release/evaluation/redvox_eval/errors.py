"""The one error type the command line turns into a clean message."""


class EvaluationError(ValueError):
    """An input the evaluator cannot use; the message names the file, row and field
    and says what to do."""

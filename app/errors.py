"""What went wrong, in plain words, with what to do about it."""

from __future__ import annotations

from dataclasses import dataclass


class ApiProblem(Exception):
    """An error answer from the service, or no answer at all."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


class ServiceUnreachable(ApiProblem):
    """Nothing answered on the service's address."""


class NotHearth(ApiProblem):
    """Something answered on the port, but it is not a Hearth service."""


@dataclass(slots=True)
class UserError:
    title: str
    detail: str
    action: str = ""  # what the user can do, as a sentence

    def text(self) -> str:
        return " ".join(p for p in (self.title, self.detail, self.action) if p)


def explain(e: BaseException, *, port: int | None = None) -> UserError:
    """Turn an exception from the client or the service into words for the window."""
    if isinstance(e, NotHearth):
        return UserError(f"Port {port} is used by another program, not Hearth.", e.message,
                         "Choose another port in Settings, or close that program, then start the server.")
    if isinstance(e, ServiceUnreachable):
        return UserError("The Hearth service is not reachable.", e.message,
                         "Start the server from the Server page (or the tray menu).")
    if isinstance(e, ApiProblem):
        if e.code == "model_does_not_fit":
            return UserError("This model is too big for this computer.", e.message,
                             "Pick a smaller model or quantization, or lower the context in Settings.")
        if e.code == "model_not_found":
            return UserError("That model is not installed.", e.message,
                             "Download it on the Models page, or pick another model.")
        if e.code == "context_length_exceeded":
            return UserError("The conversation is longer than the model's context.", e.message,
                             "Start a new chat, or raise the context in Settings.")
        if e.code == "engine_stopped":
            return UserError("The model stopped unexpectedly.", e.message, "Send again to reload it.")
        if e.code == "model_load_failed":
            return UserError("The model could not be loaded.", e.message,
                             "Check the file on the Models page, or pick another model.")
        if e.code == "download_failed":
            return UserError("The download failed.", e.message,
                             "Check the network connection and press Resume.")
        return UserError("The service refused the request.", e.message)
    return UserError("Something went wrong.", str(e) or type(e).__name__)

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


class ServiceSlow(ServiceUnreachable):
    """The service took the request but did not answer in time (busy, not gone)."""


class NotHearth(ApiProblem):
    """Something answered on the port, but it is not a Hearth service."""


class StreamCut(ApiProblem):
    """A stream of events ended without its end marker: the service or its model stopped mid-answer."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=STREAM_CUT)


STREAM_CUT = "stream_cut"
#: problems that end when the service answers again (their banner goes when it does)
SERVICE_UNREACHABLE = "service_unreachable"
SERVICE_PROBLEMS = frozenset({SERVICE_UNREACHABLE, "not_hearth", "service_stopped", "service_slow"})
#: problems that end when a model answers again
MODEL_PROBLEMS = frozenset({"engine_stopped", STREAM_CUT})


@dataclass(slots=True)
class UserError:
    title: str
    detail: str
    action: str = ""  # what the user can do, as a sentence
    #: what kind of problem (the service's error code, or the app's own): the window decides by it,
    #: e.g. a banner about an unreachable service goes once the service answers again
    code: str = ""

    def text(self) -> str:
        return " ".join(p for p in (self.title, self.detail, self.action) if p)


def explain(e: BaseException, *, port: int | None = None) -> UserError:
    """Turn an exception from the client or the service into words for the window."""
    if isinstance(e, NotHearth):
        return UserError(f"Port {port} is used by another program, not Hearth.", e.message,
                         "Choose another port in Settings, or close that program, then start the server.",
                         "not_hearth")
    if isinstance(e, ServiceSlow):
        return UserError("The Hearth service did not answer in time.", e.message,
                         "It may be loading a model; try again in a moment.", "service_slow")
    if isinstance(e, ServiceUnreachable):
        return UserError("The service is not running.", e.message,
                         "Start the server (the button here, the Server page or the tray menu).", SERVICE_UNREACHABLE)
    if isinstance(e, StreamCut):
        return UserError("The answer was cut off.", e.message,
                         "The part that arrived is kept; press Regenerate to ask again.", STREAM_CUT)
    if isinstance(e, ApiProblem):
        problem = _explain_api(e)
        problem.code = e.code or ""
        return problem
    return UserError("Something went wrong.", str(e) or type(e).__name__)


#: the service's error codes, in words: (what happened, what to do)
API_WORDS = {
    "model_does_not_fit": ("This model is too big for this computer.",
                           "Pick a smaller model or quantization, or lower the context in Settings."),
    "model_not_found": ("That model is not installed.", "Download it on the Models page, or pick another model."),
    "context_length_exceeded": ("The conversation is longer than the model's context.",
                                "Start a new chat, or raise the context in Settings."),
    "engine_stopped": ("The model stopped unexpectedly.", "Send again to reload it."),
    "model_load_failed": ("The model could not be loaded.", "Check the file on the Models page, or pick another model."),
    "download_failed": ("The download failed.", "Check the network connection and press Resume."),
    "media_not_supported": ("This model reads text only.",
                            "Pick a model marked “vision” (or “audio” for sound) in the chat's model list, or remove "
                            "the attachment."),
    "invalid_media": ("The image or sound could not be read.", "Attach it again as a PNG, JPEG or WAV file."),
}


def _explain_api(e: ApiProblem) -> UserError:
    title, action = API_WORDS.get(e.code or "", ("The service refused the request.", ""))
    return UserError(title, e.message, action)

"""Which notifiers a pipeline's ``alerts.notify`` may name, and what it may hand them: the
platform's rules, not a pipeline's (pure Python: no Airflow, no pydantic).

* ``email:`` entries use the product's own e-mail notifier (``EMAIL_NOTIFIER``): always allowed.
* ``notifier:`` entries name a class by its dotted path: allowed only when the platform lists it in
  the Airflow option ``[eobatch] allowed_notifiers`` (airflow.cfg, or
  ``AIRFLOW__EOBATCH__ALLOWED_NOTIFIERS``; comma or whitespace separated; empty by default), read by
  ``eobatch.settings`` as every setting of eobatch. A class not listed is refused at load and never
  imported.
* ``args`` and the e-mail fields are literal text: the notifier never renders them as templates
  (``eobatch.airflow.alerts`` builds every notifier with no templated field). The arguments that
  choose files or templates (an attachment, a template file, the message's subject or body) are
  not the pipeline's: ``refused_arg`` names why.
"""

from __future__ import annotations

import re

from .. import settings

EMAIL_NOTIFIER = "eobatch.airflow.alerts.EmailNotifier"  # the product's e-mail notifier (``email:``)
SECTION, OPTION = settings.SECTION, settings.ALLOWED_NOTIFIERS.option
ALLOWED_NOTIFIERS_ENV = settings.ALLOWED_NOTIFIERS.env

# what the product hands a notifier class: the alert's fields, by the keyword argument named in
# ``alert_args`` (e.g. {text: text} gives SlackNotifier(text=<the alert's text>))
ALERT_FIELDS = ("subject", "text", "html", "kind", "pipeline", "url", "run_id")

# keyword arguments of notifiers that read a file, pick a template or attach something, and the
# message itself (the alert's, through ``alert_args``): never a pipeline's ``args``
_REFUSED_EXACT = {
    "files": "attachments are not a pipeline's to choose",
    "template": "a template file is not a pipeline's to choose",
    "subject": "the subject is the alert's (give it with alert_args: {subject: subject})",
    "html_content": "the body is the alert's (give it with alert_args: {html_content: html})",
    "context": "the context is Airflow's",
}
_REFUSED_WORDS = re.compile(r"file|template|attach|path", re.IGNORECASE)
# the form the docs showed before notifier arguments became literal text
_OLD_ALERT_TEMPLATE = re.compile(r"\{\{-?\s*alert\.(\w+)\s*-?\}\}")

def allowed_notifiers() -> frozenset[str]:
    """The dotted paths of the notifier classes the platform allows (``email:`` needs none)."""
    raw = settings.value(settings.ALLOWED_NOTIFIERS)
    return frozenset(p for p in re.split(r"[\s,]+", raw or "") if p)


def refused_arg(key: str, value: object) -> str | None:
    """Why ``args.<key>`` of a notifier class is not a pipeline's to give (None: it is)."""
    if key in _REFUSED_EXACT:
        return _REFUSED_EXACT[key]
    if _REFUSED_WORDS.search(key):
        return "an argument that names a file, a path or a template is not a pipeline's to choose"
    if isinstance(value, str):
        m = _OLD_ALERT_TEMPLATE.search(value)
        if m:
            return (f"arguments are literal text, never templates: give the alert's {m.group(1)} with "
                    f"alert_args: {{{key}: {m.group(1)}}}")
    return None


def refused_alert_arg(key: str) -> str | None:
    """Why ``alert_args.<key>`` is not a pipeline's to give (None: it is): the alert's own text may
    be the subject or the body, never a file name or a template."""
    if key == "context":
        return _REFUSED_EXACT[key]
    if key in ("files", "template") or _REFUSED_WORDS.search(key):
        return "an argument that names a file, a path or a template is not a pipeline's to choose"
    return None

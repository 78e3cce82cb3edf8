"""The served pipeline's configuration (``dlrmflow serve``): the store, the schedules and the pipeline's default
parameters (``nightly.config.PipelineConfig``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from common.config import store_field
from nightly.config import LandingConfig, PipelineConfig
from preprocessing.dated import is_dated


class ServeConfig(BaseModel):
    """What `dlrmflow serve` serves: the store the deployments' forms point at, the pipeline's schedule and
    its default parameters (inputs, window, model name: what the scheduled runs use)."""

    model_config = ConfigDict(extra="forbid")

    store: str = store_field()
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig, description="The scheduled pipeline's "
                                     "parameters (the deployment's defaults in the UI form).")
    cron: str = Field("0 2 * * *", description="The pipeline's cron schedule, in `timezone` "
                      "(default: nightly at 02:00).")
    timezone: str = Field("UTC", description="Time zone of the cron schedule (an IANA name, e.g. Europe/Berlin).")
    tune_cron: str | None = Field(None, description="A cron schedule (in `timezone`) of the tune deployment: a "
                                  "re-tune of the pipeline's model on its champion's dataset, whose best config the "
                                  "nightly runs pick up with `tuned_config: model`, e.g. \"0 8 * * 6\" (Saturdays "
                                  "08:00). Needs the pipeline's model. Default: the tune runs on demand only.")
    landing: LandingConfig = Field(default_factory=LandingConfig, description="When a day of the dated inputs is "
                                   "complete: with a model and {date} inputs, serve's day-landed sensor starts the "
                                   "day's night once it is; the cron schedule stays as the fallback.")

    @field_validator("cron", "tune_cron")
    @classmethod
    def _cron(cls, cron: str | None) -> str | None:
        if cron is not None and not _schedule_ok(cron=cron):
            raise ValueError(f"{cron!r} is not a cron expression; e.g. \"0 2 * * *\" (02:00 daily)")
        return cron

    @model_validator(mode="after")
    def _tune_needs_model(self) -> "ServeConfig":
        if self.tune_cron and not self.pipeline.model:
            raise ValueError("a scheduled tune (tune_cron) tunes the pipeline's model on its champion's dataset; fix: "
                             "name the model (--model NAME) or leave tune_cron out")
        return self

    def sensor(self) -> LandingConfig | None:
        """The day-landed sensor's rule when serve runs one (a model, {date} inputs, ``landing.every_s`` > 0)."""
        dated = any(is_dated(uri) for uri in self.pipeline.preprocess.inputs)
        return self.landing if self.landing.every_s and self.pipeline.model and dated else None

    def tune_parameters(self, store: str) -> dict:
        """The tune deployment's default `config`: the served store and, with a model, that model on the base the
        pipeline trains with (its preset)."""
        if not self.pipeline.model:
            return {}
        return {"config": {"store": store, "model": self.pipeline.model,
                           "preset": self.pipeline.preset or "default"}}

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, timezone: str) -> str:
        if not _schedule_ok(cron="0 2 * * *", timezone=timezone):
            raise ValueError(f"{timezone!r} is not a time zone; e.g. UTC or Europe/Berlin")
        return timezone

    def pipeline_parameters(self, store: str) -> dict:
        """The pipeline deployment's default `config`: the served store, the schedule's time zone for its dates."""
        window = self.pipeline.window.model_copy(update={"timezone": self.timezone})
        return self.pipeline.model_copy(update={"store": store, "window": window}).model_dump(mode="json")


def _schedule_ok(**schedule) -> bool:
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(**schedule)
        return True
    except ValidationError:
        return False

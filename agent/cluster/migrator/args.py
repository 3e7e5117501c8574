"""MigrationArgs: the ``migration`` section of the controller's config, its default and
validation (the same shape as an engine's args)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.fields import Fields, config_values

KEY = "migration"
_CONFIG = Fields("config", KEY)
CONFIG_KEYS = {"placeholderImage": "placeholder_image"}
DEFAULT_PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"
#: An image reference: no whitespace, no scheme; registry/path:tag or @digest.
_IMAGE = re.compile(r"^(?!.*//)[a-z0-9][a-z0-9._\-/:]*(@sha256:[a-f0-9]{64})?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class MigrationArgs:
    #: The image of a reservation's placeholder pod: any image that sleeps and uses
    #: nothing (a mirror of the pause image in air-gapped clusters).
    placeholder_image: str = DEFAULT_PLACEHOLDER_IMAGE

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> MigrationArgs:
        return cls(**config_values(KEY, raw, CONFIG_KEYS)).validate()

    def validate(self) -> MigrationArgs:
        image = self.placeholder_image
        if not isinstance(image, str) or not _IMAGE.match(image):
            raise _CONFIG.bad(
                "placeholderImage",
                "must be an image reference like registry.k8s.io/pause:3.10",
                image,
            )
        return self

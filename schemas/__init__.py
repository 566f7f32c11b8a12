"""Pydantic models: the single definition of every record and of the Hub features."""

from .audio_cell import SAMPLE_RATE, AudioCell
from .config import DEMO_CONFIG, ConfigError, InputConfig, ItemSelection
from .entry import (
    COLUMNS,
    CONTRACT_COLUMNS,
    EXTRA_COLUMNS,
    Entry,
    column_dtypes,
    entry_key,
    release_features,
)
from .errors import UserError, os_error_message
from .records import (
    ConsentRecord,
    ConsentState,
    Contribution,
    NoiseCondition,
    Participant,
    SourceItem,
    resolve_consent,
)
from .vocab import (
    AGE_GROUPS,
    GENDERS,
    LANGUAGES,
    VULNERABILITY_TYPES,
    VocabularyError,
    malert_group,
    normalize_age_group,
    normalize_gender,
    normalize_mother_tongue,
    primary_language,
)

# Records `redvox schema` prints, in pipeline order.
SCHEMA_RECORDS = {
    "SourceItem": SourceItem,
    "Participant": Participant,
    "ConsentRecord": ConsentRecord,
    "Contribution": Contribution,
    "NoiseCondition": NoiseCondition,
    "Entry": Entry,
    "InputConfig": InputConfig,
}

__all__ = [
    "AGE_GROUPS", "COLUMNS", "CONTRACT_COLUMNS", "DEMO_CONFIG", "EXTRA_COLUMNS", "GENDERS",
    "LANGUAGES", "SAMPLE_RATE", "SCHEMA_RECORDS", "VULNERABILITY_TYPES", "AudioCell", "ConfigError",
    "ConsentRecord", "ConsentState", "Contribution", "Entry", "InputConfig", "ItemSelection",
    "NoiseCondition", "Participant", "SourceItem", "UserError", "VocabularyError", "column_dtypes", "entry_key",
    "malert_group", "normalize_age_group", "normalize_gender", "normalize_mother_tongue",
    "os_error_message", "primary_language", "release_features", "resolve_consent",
]  # fmt: skip

from redvox.schemas import CONTRACT_COLUMNS, release_features


def test_features_start_with_contract_columns():
    assert tuple(release_features())[: len(CONTRACT_COLUMNS)] == CONTRACT_COLUMNS

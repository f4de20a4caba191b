"""Pure stage logic: no Prefect imports here (see STYLE.md)."""

DROP INDEX overrides_page;

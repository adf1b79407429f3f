DROP INDEX tenants_page;

-- Pages of the tenants (ListTenants) in the byte order of their slugs, and
-- slug prefixes found with LIKE 'p%', from the index whatever the
-- database's collation.
CREATE INDEX tenants_page ON tenants ((slug COLLATE "C"));

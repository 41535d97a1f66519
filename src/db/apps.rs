//! FastEdge apps (unique names, a filtered and sorted list) and the security profile templates
//! they are offered.

use super::codec::{app_from_row, fold, from_json, to_json, APP_COLUMNS};
use super::conn::{args, exists, sql_offset, Backend, Pool, Tx, Value};
use super::Update;
use super::{AppFilter, AppOrderKey, AppRow, AppSettings, ProfileTemplate, SqlStore, StoreError};

pub trait AppStore {
    fn create_app(&self, settings: &AppSettings) -> Result<Update<AppRow>, StoreError>;
    fn get_app(&self, id: i64) -> Result<Option<AppRow>, StoreError>;
    /// Returns the page and the number of apps matching the filter before paging.
    fn list_apps(&self, filter: &AppFilter) -> Result<(Vec<AppRow>, u64), StoreError>;
    fn update_app(
        &self,
        id: i64,
        revision: i64,
        settings: &AppSettings,
    ) -> Result<Update<AppRow>, StoreError>;
    fn delete_app(&self, id: i64) -> Result<bool, StoreError>;

    /// Inserts or replaces templates by id.
    fn upsert_profile_templates(&self, templates: &[ProfileTemplate]) -> Result<(), StoreError>;
    fn list_profile_templates(&self) -> Result<Vec<ProfileTemplate>, StoreError>;
}

/// An app's columns after `name`, in the order of the insert and update statements.
fn app_args(s: &AppSettings) -> [Value; 9] {
    args![
        s.name.as_str(),
        Value::ByteText(fold(&s.name)),
        s.status,
        s.api_type.as_str(),
        s.template,
        s.binary,
        s.plan_id,
        Value::ByteText(s.plan.clone()),
        to_json(s)
    ]
}

/// The filter's `WHERE` clause and its arguments (`$1…`).
fn filter_sql(f: &AppFilter, contains: impl Fn(usize) -> String) -> (String, Vec<Value>) {
    let mut clauses: Vec<String> = Vec::new();
    let mut args: Vec<Value> = Vec::new();
    let mut add = |clause: &dyn Fn(usize) -> String, arg: Value| {
        args.push(arg);
        clauses.push(clause(args.len()));
    };
    if let Some(name) = &f.name {
        add(&contains, Value::ByteText(fold(name)));
    }
    if let Some(t) = f.api_type {
        add(&|n| format!("api_type = ${n}"), t.as_str().into());
    }
    if let Some(s) = f.status {
        add(&|n| format!("status = ${n}"), s.into());
    }
    if let Some(t) = f.template {
        add(&|n| format!("template = ${n}"), t.into());
    }
    if let Some(b) = f.binary {
        add(&|n| format!("\"binary\" = ${n}"), b.into());
    }
    if let Some(p) = f.plan {
        add(&|n| format!("plan_id = ${n}"), p.into());
    }
    if clauses.is_empty() {
        return (String::new(), args);
    }
    (format!("WHERE {}", clauses.join(" AND ")), args)
}

/// NULLs sort before every value, as SQLite's default has it (PostgreSQL's is the reverse).
fn order_sql(key: AppOrderKey, descending: bool) -> String {
    let column = match key {
        AppOrderKey::Name => "name",
        AppOrderKey::Status => "status",
        AppOrderKey::Id => "id",
        AppOrderKey::Template => "template",
        AppOrderKey::Binary => "\"binary\"",
        AppOrderKey::Plan => "plan",
    };
    let dir = if descending {
        "DESC NULLS LAST"
    } else {
        "ASC NULLS FIRST"
    };
    // id (ascending) breaks ties so paging through equal keys neither repeats nor skips a row.
    format!("ORDER BY {column} {dir}, id ASC")
}

impl<B: Backend> AppStore for SqlStore<B> {
    fn create_app(&self, s: &AppSettings) -> Result<Update<AppRow>, StoreError> {
        let inserted = self.backend().with_conn(Pool::Main, |c| {
            c.query_one(
                &format!(
                    "INSERT INTO apps (revision, name, name_folded, status, api_type, template, \
                       \"binary\", plan_id, plan, settings) \
                     VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {APP_COLUMNS}"
                ),
                &app_args(s),
            )
        });
        match inserted {
            Err(e) if e.is_unique_violation() => Ok(Update::NameTaken),
            Err(e) => Err(e),
            Ok(row) => Ok(Update::Done(app_from_row(&row)?)),
        }
    }

    fn get_app(&self, id: i64) -> Result<Option<AppRow>, StoreError> {
        let sql = format!("SELECT {APP_COLUMNS} FROM apps WHERE id = $1");
        self.backend()
            .with_conn(Pool::Main, |c| c.query_opt(&sql, &args![id]))?
            .map(|r| app_from_row(&r))
            .transpose()
    }

    fn list_apps(&self, f: &AppFilter) -> Result<(Vec<AppRow>, u64), StoreError> {
        let (key, descending) = f.order.unwrap_or((AppOrderKey::Id, false));
        let order_sql = order_sql(key, descending);
        self.backend().transaction(Pool::Main, Tx::Snapshot, |c| {
            let d = c.dialect();
            let (where_sql, mut args) = filter_sql(f, |n| d.contains("name_folded", n));
            let n = args.len();
            let count_sql = format!("SELECT COUNT(*) FROM apps {where_sql}");
            let count = c.query_one(&count_sql, &args)?.i64(0)?;
            args.extend(args![f.limit, sql_offset(f.offset)]);
            let page_sql = format!(
                "SELECT {APP_COLUMNS} FROM apps {where_sql} {order_sql} LIMIT ${} OFFSET ${}",
                n + 1,
                n + 2
            );
            let rows = c.query(&page_sql, &args)?;
            let rows = rows.iter().map(app_from_row).collect::<Result<_, _>>()?;
            Ok((rows, count as u64))
        })
    }

    fn update_app(
        &self,
        id: i64,
        revision: i64,
        s: &AppSettings,
    ) -> Result<Update<AppRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            let mut args = app_args(s).to_vec();
            args.extend(args![id, revision]);
            let updated = c.query_opt(
                &format!(
                    "UPDATE apps SET name = $1, name_folded = $2, status = $3, api_type = $4, \
                       template = $5, \"binary\" = $6, plan_id = $7, plan = $8, settings = $9, \
                       revision = revision + 1 WHERE id = $10 AND revision = $11 \
                     RETURNING {APP_COLUMNS}"
                ),
                &args,
            );
            match updated {
                Err(e) if e.is_unique_violation() => Ok(Update::NameTaken),
                Err(e) => Err(e),
                Ok(Some(row)) => Ok(Update::Done(app_from_row(&row)?)),
                Ok(None) if exists(c, "apps", id)? => Ok(Update::Stale),
                Ok(None) => Ok(Update::NotFound),
            }
        })
    }

    fn delete_app(&self, id: i64) -> Result<bool, StoreError> {
        let deleted = self.backend().with_conn(Pool::Main, |c| {
            c.execute("DELETE FROM apps WHERE id = $1", &args![id])
        })?;
        Ok(deleted == 1)
    }

    fn upsert_profile_templates(&self, templates: &[ProfileTemplate]) -> Result<(), StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            for t in templates {
                c.execute(
                    "INSERT INTO profile_templates (id, body) VALUES ($1, $2) \
                     ON CONFLICT (id) DO UPDATE SET body = excluded.body",
                    &args![t.id, to_json(t)],
                )?;
            }
            Ok(())
        })
    }

    fn list_profile_templates(&self) -> Result<Vec<ProfileTemplate>, StoreError> {
        let rows = self.backend().with_conn(Pool::Main, |c| {
            c.query("SELECT id, body FROM profile_templates ORDER BY id", &[])
        })?;
        rows.iter()
            .map(|r| from_json("profile template", r.i64(0)?, &r.string(1)?))
            .collect()
    }
}

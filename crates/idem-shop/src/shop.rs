//! The shop itself: books with versioned stock, and orders counted per business intent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use crate::pb;
use crate::stock::StockLink;

/// A book row: title, price, stock and the stock's version (optimistic concurrency).
#[derive(Debug, Clone)]
struct BookRow {
    title: String,
    price_cents: u64,
    stock: i64,
    version: u64,
}

/// The shop's state, shared by clones. Locks are short and never held across an `.await`.
#[derive(Debug, Clone)]
pub struct Shop {
    inner: Arc<State>,
}

#[derive(Debug)]
struct State {
    books: Mutex<HashMap<String, BookRow>>,
    /// Order ids created per intent: the side effect the demo and the Z1 test check.
    orders: Mutex<HashMap<String, Vec<u64>>>,
    next_order: AtomicU64,
    work: Duration,
    /// Stock taken per intent, for orders (the stock service's side effect).
    deductions: Mutex<HashMap<String, u32>>,
    /// Where CreateOrder deducts its stock first (the order service of the demo); `None`: it
    /// takes no stock.
    stock: Option<StockLink>,
}

/// A `tonic::Status` with an `idem-reason` (read by the client layer's classifier).
pub fn status_with_reason(code: tonic::Code, message: &str, reason: &str) -> Status {
    let mut md = tonic::metadata::MetadataMap::new();
    if let Ok(v) = reason.parse() {
        md.insert("idem-reason", v);
    }
    Status::with_metadata(code, message, md)
}

impl Shop {
    /// A shop with three books (`book-1`, `book-2`, `book-42`), each 1,000,000 in stock, and no
    /// simulated work per order.
    pub fn new() -> Self {
        Shop::with_work(Duration::ZERO)
    }

    /// As [`new`](Self::new); each order takes `work` (a `tokio::time::sleep`) before it is
    /// recorded, so requests stay in flight long enough to be seen.
    pub fn with_work(work: Duration) -> Self {
        Shop::build(work, None)
    }

    /// An order service: as [`with_work`](Self::with_work), and each CreateOrder first deducts
    /// its stock in the stock service behind `stock`, then records the order.
    pub fn with_stock(work: Duration, stock: StockLink) -> Self {
        Shop::build(work, Some(stock))
    }

    fn build(work: Duration, stock: Option<StockLink>) -> Self {
        let books = [
            ("book-1", "The Idempotent Programmer", 2_500),
            ("book-2", "Retry Budgets in Practice", 3_900),
            ("book-42", "Effectively Once", 4_200),
        ]
        .into_iter()
        .map(|(sku, title, price)| {
            (
                sku.to_owned(),
                BookRow {
                    title: title.to_owned(),
                    price_cents: price,
                    stock: 1_000_000,
                    version: 1,
                },
            )
        })
        .collect();
        Shop {
            inner: Arc::new(State {
                books: Mutex::new(books),
                orders: Mutex::new(HashMap::new()),
                next_order: AtomicU64::new(1000),
                work,
                deductions: Mutex::new(HashMap::new()),
                stock,
            }),
        }
    }

    /// Orders created for an intent (0, 1, or — a bug — more).
    pub fn orders_for(&self, intent: &str) -> Vec<u64> {
        self.inner
            .orders
            .lock()
            .get(intent)
            .cloned()
            .unwrap_or_default()
    }

    /// Every intent's order ids.
    pub fn orders(&self) -> HashMap<String, Vec<u64>> {
        self.inner.orders.lock().clone()
    }

    /// Stock deductions made for orders, per intent (0, 1, or — a bug — more).
    pub fn deductions(&self) -> HashMap<String, u32> {
        self.inner.deductions.lock().clone()
    }

    /// The link to the stock service, for an order service.
    pub fn stock_link(&self) -> Option<&StockLink> {
        self.inner.stock.as_ref()
    }

    /// Orders created in all.
    pub fn orders_total(&self) -> u64 {
        self.inner
            .orders
            .lock()
            .values()
            .map(|v| v.len() as u64)
            .sum()
    }

    /// Reads a book.
    ///
    /// # Errors
    ///
    /// `NOT_FOUND` for an unknown sku.
    pub fn book(&self, sku: &str) -> Result<pb::Book, Status> {
        let books = self.inner.books.lock();
        let b = books
            .get(sku)
            .ok_or_else(|| Status::not_found(format!("no book {sku}")))?;
        Ok(pb::Book {
            sku: sku.to_owned(),
            title: b.title.clone(),
            price_cents: b.price_cents,
            stock: b.stock,
            stock_version: b.version,
        })
    }

    /// Creates an order for an intent: the side effect.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` for a zero quantity or an empty intent, `NOT_FOUND` for an unknown sku.
    pub async fn create_order(&self, req: pb::CreateOrderRequest) -> Result<pb::Order, Status> {
        if req.quantity == 0 || req.intent_id.is_empty() {
            return Err(Status::invalid_argument(
                "quantity must be at least 1 and intent_id non-empty",
            ));
        }
        if !self.inner.books.lock().contains_key(&req.sku) {
            return Err(Status::not_found(format!("no book {}", req.sku)));
        }
        if let Some(stock) = &self.inner.stock {
            stock.deduct(&req).await?;
        }
        if !self.inner.work.is_zero() {
            tokio::time::sleep(self.inner.work).await;
        }
        let order_id = self.inner.next_order.fetch_add(1, Relaxed);
        self.inner
            .orders
            .lock()
            .entry(req.intent_id.clone())
            .or_default()
            .push(order_id);
        Ok(pb::Order {
            order_id,
            intent_id: req.intent_id,
            sku: req.sku,
            quantity: req.quantity,
        })
    }

    /// Takes stock if the caller saw the current version, or, for an order (`intent_id` set),
    /// whatever the version; an order's deduction is counted for its intent.
    ///
    /// # Errors
    ///
    /// `ABORTED` with reason `STOCK_CONFLICT` on a stale version; `FAILED_PRECONDITION` when the
    /// stock is short; `NOT_FOUND` for an unknown sku.
    pub fn deduct_stock(&self, req: &pb::DeductStockRequest) -> Result<pb::Stock, Status> {
        let mut books = self.inner.books.lock();
        let b = books
            .get_mut(&req.sku)
            .ok_or_else(|| Status::not_found(format!("no book {}", req.sku)))?;
        if req.intent_id.is_empty() && b.version != req.expected_version {
            return Err(status_with_reason(
                tonic::Code::Aborted,
                &format!(
                    "stock of {} is at version {}, not {}: re-read and retry",
                    req.sku, b.version, req.expected_version
                ),
                "STOCK_CONFLICT",
            ));
        }
        if b.stock < i64::from(req.quantity) {
            return Err(Status::failed_precondition("not enough stock"));
        }
        b.stock -= i64::from(req.quantity);
        b.version += 1;
        if !req.intent_id.is_empty() {
            *self
                .inner
                .deductions
                .lock()
                .entry(req.intent_id.clone())
                .or_default() += 1;
        }
        Ok(pb::Stock {
            sku: req.sku.clone(),
            stock: b.stock,
            version: b.version,
        })
    }
}

impl Default for Shop {
    fn default() -> Self {
        Shop::new()
    }
}

#[tonic::async_trait]
impl pb::shop_server::Shop for Shop {
    async fn get_book(
        &self,
        request: Request<pb::GetBookRequest>,
    ) -> Result<Response<pb::Book>, Status> {
        self.book(&request.get_ref().sku).map(Response::new)
    }

    async fn create_order(
        &self,
        request: Request<pb::CreateOrderRequest>,
    ) -> Result<Response<pb::Order>, Status> {
        Shop::create_order(self, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn deduct_stock(
        &self,
        request: Request<pb::DeductStockRequest>,
    ) -> Result<Response<pb::Stock>, Status> {
        self.deduct_stock(request.get_ref()).map(Response::new)
    }
}
